"""Run by the engine's Python (as a script; at module level the standard library and zerolab's
workarounds, standard library too until they patch): Megatron's own argument parser and
DeepSpeed's config classes judge rendered launches without training, under the import hooks of
every launch's workarounds.

For each case (argv after pretrain_gpt.py, ds_config, world size, data-parallel size, the
ds_config keys to vouch for): Megatron's parse_args, validate_args and
build_num_microbatches_calculator (only that one checks global batch % (micro batch x data
parallel)), then DeepSpeed's DeepSpeedZeroConfig and DeepSpeedConfig, reading the ds_config
through a mapping that records every key they ask for: a key to vouch for that DeepSpeed never
asked for is one it ignores silently (a misspelling), named with the keys it did ask for. Asking
covers every way DeepSpeed's code reads a key: indexing, get, `in` (also `in mapping.keys()`, as the
compression config asserts a key's presence), iterating its items or values (every key of the
block is read), and copying a block whole (`copy.copy`: curriculum_learning, data_efficiency's
data_sampling, random_ltd...), which hands every key inside it to code that reads it later.
A case may give Megatron's argument dump as a log printed it (`argument_dump`: each argument's
printed text) instead of its arguments: the command line is rebuilt with Megatron's own parser
(argv_of_dump), then judged like any other.
Usage: python parser_check.py CASES.json RESULTS.json STORE_FILE, with the
Megatron-DeepSpeed checkout as working directory, DS_ACCELERATOR=cpu and RANK=0.
"""

import argparse
import ast
import contextlib
import copy
import difflib
import io
import json
import os
import sys

from zerolab.rank.workarounds import apply_all


class DataParallelGroup:
    """What DeepSpeedConfig asks of Megatron's mpu: the data-parallel size."""

    def __init__(self, size):
        self.size = size

    def get_data_parallel_world_size(self):
        return self.size


ASKED = set()
"""(path, key) of every ds_config key DeepSpeed asked for, present or not."""

WHOLE = set()
"""Paths of the blocks DeepSpeed copied whole (copy.copy) to read later: every key inside is read.
Not the top level: DeepSpeedConfig copies the whole config first and reads that copy key by key."""


class AskedKeysView:
    """`mapping.keys()` of an AskedKeys: `key in view` asks for the key."""

    def __init__(self, mapping):
        self._mapping = mapping

    def __contains__(self, key):
        self._mapping._ask(key)
        return dict.__contains__(self._mapping, key)

    def __iter__(self):
        return iter(dict.keys(self._mapping))

    def __len__(self):
        return dict.__len__(self._mapping)

    def __repr__(self):
        return repr(dict.keys(self._mapping))


class AskedKeys(dict):
    """A ds_config mapping that records the keys asked of it, and of the mappings inside it. Its
    own __iter__ makes `**mapping` ask for each key too (pydantic configs judge those themselves)."""

    path = ()

    def __iter__(self):
        return super().__iter__()

    def _ask(self, key):
        ASKED.add((self.path, key))

    def __getitem__(self, key):
        self._ask(key)
        return self._nested(key, super().__getitem__(key))

    def get(self, key, default=None):
        self._ask(key)
        return self._nested(key, super().get(key, default)) if key in self.keys() else default

    def __contains__(self, key):
        self._ask(key)
        return super().__contains__(key)

    def pop(self, key, *default):
        self._ask(key)
        return super().pop(key, *default)

    def setdefault(self, key, default=None):
        self._ask(key)
        return super().setdefault(key, default)

    def keys(self):
        return AskedKeysView(self)

    def items(self):
        for key in dict.keys(self):
            self._ask(key)
        return [(key, self._nested(key, dict.__getitem__(self, key))) for key in dict.keys(self)]

    def values(self):
        return [value for _, value in self.items()]

    def __copy__(self):
        if self.path:
            WHOLE.add(self.path)
        copied = AskedKeys(dict.items(self))
        copied.path = self.path
        return copied

    def __deepcopy__(self, memo):
        if self.path:
            WHOLE.add(self.path)
        return copy.deepcopy(dict(dict.items(self)), memo)

    def _nested(self, key, value):
        if isinstance(value, dict) and not isinstance(value, AskedKeys):
            value = asked_keys(value, (*self.path, key))
            super().__setitem__(key, value)
        return value


def asked_keys(mapping, path=()):
    """`mapping` as an AskedKeys at `path`."""
    recorded = AskedKeys(mapping)
    recorded.path = path
    return recorded


def unread_keys(config, vouch, path=()):
    """The keys of `vouch` (a mapping of ds_config keys) that DeepSpeed never asked for, as lines
    naming the key and the keys it asks for at that level."""
    if any(path[: len(whole)] == whole for whole in WHOLE):
        return []  # copied whole, every key inside it handed on to the code that reads the block
    known = sorted(name for where, name in ASKED if where == path)
    if path and not known:
        return []  # handed whole to one of DeepSpeed's pydantic configs, which refuses unknown keys itself
    lines = []
    for key, value in vouch.items():
        if (path, key) not in ASKED:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = (
                f"did you mean `{'.'.join((*path, close[0]))}`?" if close else "it reads: " + ", ".join(known)
            )
            lines.append(f"extra.ds_config key `{'.'.join((*path, key))}` is not read by DeepSpeed; {hint}")
        elif isinstance(value, dict) and isinstance(config.get(key), dict):
            lines += unread_keys(config[key], value, (*path, key))
    return lines


def jsonable(values):
    """`values` (a mapping) with only what JSON holds as it is: numbers, strings, booleans, None and
    lists and mappings of them (an enum as its value); the rest left out."""
    out = {}
    for name, value in values.items():
        kept = _jsonable(value)
        if kept is not _OMIT:
            out[str(name)] = kept
    return out


_OMIT = object()


def _jsonable(value):
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "value") and isinstance(value.value, bool | int | float | str):
        return value.value  # an enum
    if isinstance(value, list | tuple):
        items = [_jsonable(item) for item in value]
        return _OMIT if any(item is _OMIT for item in items) else items
    if isinstance(value, dict):
        return jsonable(value)
    return _OMIT


def _snapshot(value, depth=0):
    """What DeepSpeed made of a config, deep: its objects as their public attributes."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_snapshot(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {str(key): _snapshot(item, depth + 1) for key, item in value.items()}
    if hasattr(value, "model_dump"):
        return _snapshot(value.model_dump(), depth + 1)
    if hasattr(value, "value") and isinstance(value.value, bool | int | float | str):
        return value.value  # an enum
    if hasattr(value, "__dict__") and depth < 4:
        return {
            key: _snapshot(item, depth + 1)
            for key, item in vars(value).items()
            if not key.startswith("_") and key != "mpu"
        }
    return type(value).__name__


def _leaves(config, path=()):
    for key, value in config.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, (*path, key))
        else:
            yield (*path, key)


def _without(config, path):
    trimmed = copy.deepcopy(config)
    node = trimmed
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return trimmed


def unchanged_leaves(config, data_parallel, resolve):
    """The dotted keys of `config` without which DeepSpeed resolves it the same (its default, or a
    key it does not read), `resolve` being DeepSpeedConfig."""
    whole = _snapshot(resolve(copy.deepcopy(config), mpu=DataParallelGroup(data_parallel)))
    unchanged = []
    for path in _leaves(config):
        try:
            other = resolve(_without(config, path), mpu=DataParallelGroup(data_parallel))
        except BaseException:
            continue  # needed: DeepSpeed refuses the config without it
        if _snapshot(other) == whole:
            unchanged.append(".".join(path))
    return unchanged


def _defaults(parse_args):
    """Megatron's parser's value of every argument given none."""
    argv = sys.argv
    try:
        sys.argv = ["pretrain_gpt.py"]
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return jsonable(vars(parse_args()))
    finally:
        sys.argv = argv


PROCESS_ARGS = {"local_rank"}
"""Arguments of the process, not of the launch: left out of a rebuilt command line."""

DERIVED_OR_REFUSED = ("encoder_num_layers", "encoder_seq_length", "start_weight_decay", "end_weight_decay")
"""Arguments validate_args copies from another (num_layers, seq_length, weight_decay) and refuses
to be given beside it (it asserts them None): never on a rebuilt command line whose dump printed
the other too."""


def megatron_parser(parse_args):
    """Megatron's argument parser, as its parse_args builds it (caught where it parses)."""
    caught = []
    original = argparse.ArgumentParser.parse_args

    def catch(self, *args, **kwargs):
        caught.append(self)
        return original(self, *args, **kwargs)

    argv = sys.argv
    try:
        argparse.ArgumentParser.parse_args = catch
        sys.argv = ["pretrain_gpt.py"]
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            parse_args()
    finally:
        argparse.ArgumentParser.parse_args = original
        sys.argv = argv
    return caught[-1]


def _words(action, printed):
    """The flag and values that give `action`'s argument the printed text; None where none can."""
    option = next(name for name in action.option_strings if name.startswith("--"))
    if action.nargs == 0:  # store_true, store_false, store_const
        return [option] if printed == str(action.const) else None
    if printed == "None":
        return None
    if action.nargs in (None, "?"):
        return [option, printed]
    try:
        items = ast.literal_eval(printed)
    except (ValueError, SyntaxError):
        return None
    return [option, *(str(item) for item in (items if isinstance(items, list | tuple) else [items]))]


def _printed_after(argv, world_size, parse_args, validate_args):
    """Each argument as validate_args leaves it for `argv`, as _print_args prints it (str of the
    value); None where Megatron refuses `argv`."""
    saved = sys.argv
    try:
        os.environ["WORLD_SIZE"] = str(world_size)
        sys.argv = ["pretrain_gpt.py", *argv]
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args = parse_args()
            validate_args(args)
    except BaseException:
        return None
    finally:
        sys.argv = saved
    return {name: str(value) for name, value in vars(args).items()}


def argv_of_dump(dump, world_size):
    """The command line that Megatron's parser and validate_args resolve to the printed `dump`
    (argument -> printed text): a flag for each argument printed otherwise than its parser's default,
    then, from the parser's last argument back, each flag left out whose argument validate_args
    derives the same without it (ffn_hidden_size, kv_channels, global_batch_size...). Returns
    (argv, the arguments no command line of this parser gives their printed value, the printed
    arguments this engine does not have: a dump of another version)."""
    # megatron here, not at the top: only in the engine's environment
    from megatron.arguments import parse_args, validate_args

    parser = megatron_parser(parse_args)
    defaults = vars(parser.parse_args([]))
    wanted = {}
    for action in parser._actions:
        name = action.dest
        if not action.option_strings or name not in dump or name in PROCESS_ARGS or name in wanted:
            continue
        if dump[name] == str(defaults.get(name)):
            continue
        words = _words(action, dump[name])
        if words is not None:
            wanted[name] = words
    for name in DERIVED_OR_REFUSED:
        wanted.pop(name, None)
    dests = {action.dest for action in parser._actions if action.dest in dump} - PROCESS_ARGS

    def missed(names):
        printed = _printed_after(
            [word for name in names for word in wanted[name]], world_size, parse_args, validate_args
        )
        return None if printed is None else {name for name in dests if printed.get(name) != dump[name]}

    kept = list(wanted)
    wrong = missed(kept)
    for name in reversed(list(wanted)):
        if wrong is None:
            break
        trial = [other for other in kept if other != name]
        without = missed(trial)
        if without is not None and without <= wrong:
            kept, wrong = trial, without
    argv = [word for name in kept for word in wanted[name]]
    known = _printed_after(argv, world_size, parse_args, validate_args) or {}
    unknown = sorted(name for name in dump if name not in known and name not in PROCESS_ARGS)
    return argv, sorted(dests) if wrong is None else sorted(wrong), unknown


def _reason(error, printed):
    """The error as one line: argparse's own message (it prints, then exits 2), or the exception."""
    lines = [line for line in printed.getvalue().splitlines() if line.strip()]
    if isinstance(error, SystemExit) and lines:
        return lines[-1]
    text = "; ".join(
        line.strip()
        for line in str(error).splitlines()
        if line.strip() and not line.strip().startswith("For further information")
    )
    return f"{type(error).__name__}: {text or '(no message)'}"


def check(case):
    """Megatron's and DeepSpeed's verdict on one case."""
    # deepspeed, megatron here, not at the top: only in the engine's environment
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from megatron.arguments import parse_args, validate_args
    from megatron.microbatches import build_num_microbatches_calculator

    outcome = {}
    printed = io.StringIO()
    try:
        os.environ["WORLD_SIZE"] = str(case["world_size"])
        sys.argv = ["pretrain_gpt.py", *case["megatron_args"]]
        with contextlib.redirect_stderr(printed), contextlib.redirect_stdout(io.StringIO()):
            args = parse_args()
            validate_args(args)
            calculator = build_num_microbatches_calculator(args)
        outcome["megatron"] = {
            "num_microbatches": calculator.get(),
            "zero_stage": args.zero_stage,
            "data_parallel_size": args.data_parallel_size,
            "train_iters": args.train_iters,
            "args": jsonable(vars(args)),
            "defaults": _defaults(parse_args),
        }
    except BaseException as error:
        outcome["megatron_error"] = _reason(error, printed)
    try:
        ASKED.clear()
        WHOLE.clear()
        DeepSpeedZeroConfig(**case["ds_config"].get("zero_optimization", {}))
        recorded = asked_keys(case["ds_config"])
        config = DeepSpeedConfig(recorded, mpu=DataParallelGroup(case["data_parallel"]))
        unread = unread_keys(recorded, case["vouch"])
        if unread:
            outcome["deepspeed_error"] = "; ".join(unread)
            return outcome
        outcome["deepspeed"] = {
            "train_batch_size": config.train_batch_size,
            "gradient_accumulation_steps": config.gradient_accumulation_steps,
            "zero_stage": config.zero_optimization_stage,
            "resolved": jsonable(
                {name: value for name, value in vars(config).items() if not name.startswith("_")}
                | {"zero_config": config.zero_config.model_dump()}
            ),
            "unchanged": unchanged_leaves(case["ds_config"], case["data_parallel"], DeepSpeedConfig),
        }
    except BaseException as error:
        outcome["deepspeed_error"] = _reason(error, io.StringIO())
    return outcome


def main(cases_file, results_file, store_file):
    # the import hooks of every launch's workarounds first, as a rank has them when its parser runs
    # (and without torch's compiler: this process imports in 3 s, not 7); deepspeed here, not at the
    # top: only in the engine's environment
    apply_all()
    import deepspeed

    sys.path.insert(0, os.getcwd())
    deepspeed.init_distributed(
        dist_backend="gloo",
        auto_mpi_discovery=False,
        verbose=False,
        init_method="file://" + store_file,
        rank=0,
        world_size=1,
    )
    with open(cases_file) as handle:
        cases = json.load(handle)
    results = {}
    for case in cases:
        rebuilt = {}
        if case.get("argument_dump"):
            argv, unreached, unknown = argv_of_dump(case["argument_dump"], case["world_size"])
            case["megatron_args"] = argv
            rebuilt = {"rebuilt_args": argv, "unreached": unreached, "unknown": unknown}
        results[case["name"]] = check(case) | rebuilt
    with open(results_file, "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    main(*sys.argv[1:4])
