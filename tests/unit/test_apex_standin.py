"""zerolab's torch stand-ins for NVIDIA apex without the engine: the compiled extension functions
import and refuse with the fix, and a real apex is used where there is one, the stand-ins serving
nothing. What they compute, in the engine's Python: tests/engine/test_engine_apex_standin.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from apex_standin_helpers import REFUSALS, assert_refused, run_python

from zerolab.locations import REPO_ROOT

"""Prelude: the launch patch applied as a CUDA rank applies it (exit 77 where a real apex is found);
the tests' processes say DS_ACCELERATOR=cpu, for the engine's imports on this CPU."""


def test_compiled_extension_functions_import_and_refuse_with_the_fix():
    out = run_python(
        sys.executable,
        REFUSALS,
        """
        import amp_C, fused_layer_norm_cuda
        refused("amp_C.multi_tensor_l2norm", lambda: amp_C.multi_tensor_l2norm(2048, None, [[]], False))
        refused("fused_layer_norm_cuda.forward_affine", lambda: fused_layer_norm_cuda.forward_affine())
        """,
    )
    assert_refused(out, "amp_C.multi_tensor_l2norm", "fused_layer_norm_cuda.forward_affine")


def test_a_real_apex_is_used_and_the_standins_serve_nothing(tmp_path):
    (tmp_path / "apex").mkdir()
    (tmp_path / "apex" / "__init__.py").write_text("REAL = True\n")
    code = """
        from zerolab.rank.apex_standin import APEX_TORCH_STANDINS
        print(APEX_TORCH_STANDINS.wanted())
        APEX_TORCH_STANDINS.apply()  # even installed, the finder only serves what nothing else finds
        import apex
        print(getattr(apex, "REAL", False))
        """
    env = {"PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{tmp_path}"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    assert result.stdout.split() == ["False", "True"], result.stderr
    wanted = "from zerolab.rank.apex_standin import APEX_TORCH_STANDINS as p; import sys\n"
    wanted += "print(p.wanted(), sys.modules.get('apex'))"
    for accelerator, expected in ((None, "True None"), ("cpu", "False None")):
        env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"} | {"PYTHONPATH": str(REPO_ROOT)}
        env |= {"DS_ACCELERATOR": accelerator} if accelerator else {}
        result = subprocess.run([sys.executable, "-c", wanted], env=env, capture_output=True, text=True)
        assert result.stdout.strip() == expected, result.stderr  # nothing imported to decide; CPU: unwanted
