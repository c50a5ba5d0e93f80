"""The tokenizer gives Megatron's GPT2BPETokenizer ids (checked against other implementations)."""

import functools

from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tokenizers import ByteLevelBPETokenizer

from zerolab.assets import EOT_TOKEN_ID, GPT2_MERGES, GPT2_VOCAB
from zerolab.data_prep.tokenizer import decode, encode, mergeable_ranks


def test_ranks_from_vocab_equal_tiktokens_conversion_of_vocab_and_merges(monkeypatch):

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # read the local files, cache nothing
    assert mergeable_ranks() == data_gym_to_mergeable_bpe_ranks(str(GPT2_MERGES), str(GPT2_VOCAB))


@functools.lru_cache(maxsize=1)
def hf_tokenizer():

    return ByteLevelBPETokenizer(str(GPT2_VOCAB), str(GPT2_MERGES))


def test_literal_end_of_text_is_ordinary_text():
    ids = encode("a<|endoftext|>b").tolist()
    assert EOT_TOKEN_ID not in ids
    assert ids == hf_tokenizer().encode("a<|endoftext|>b").ids
    assert decode(ids) == "a<|endoftext|>b"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_ids_equal_hf_tokenizers_on_any_text(text):
    assert encode(text).tolist() == hf_tokenizer().encode(text).ids


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from(["'s", "'ll", " ", "  ", "\n", "\t", "word", "123", "é", "🙂", "!?", "\r\n"]))
)
def test_ids_equal_hf_tokenizers_on_gpt2_pattern_edges(parts):
    text = "".join(parts)
    assert encode(text).tolist() == hf_tokenizer().encode(text).ids
