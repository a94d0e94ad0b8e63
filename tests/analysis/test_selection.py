"""Issue 45: what to label next. Each strategy ranks by what it says, repeats exactly for a seed, and diverse does
not spend a budget on near-copies."""
import numpy as np
import pytest

from paddle_ft.analysis.selection import (
    STRATEGIES,
    k_center,
    margin,
    select,
    uncertainty,
)


def pool(n=40, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, classes)) * rng.uniform(0.1, 4.0, size=(n, 1))
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    vectors = rng.normal(size=(n, 8))
    return probabilities, vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_uncertainty_and_margin_rank_the_least_sure_first():
    probabilities = np.array([[0.98, 0.01, 0.01], [0.34, 0.33, 0.33], [0.6, 0.4, 0.0], [0.5, 0.5, 0.0]])
    order, scores = select("uncertainty", probabilities, 4)
    assert order.tolist() == [1, 3, 2, 0] and np.all(np.diff(scores) <= 0)
    assert select("margin", probabilities, 2)[0].tolist() == [3, 1]  # gaps 0.0 and 0.01
    assert uncertainty(np.array([[0.5, 0.5]]))[0] == pytest.approx(np.log(2))
    # multi-label: each label's own probability against its threshold
    multi = np.array([[0.9, 0.05], [0.45, 0.1], [0.2, 0.99]])
    assert margin(multi, (0.5, 0.5)).tolist() == pytest.approx([0.4, 0.05, 0.3])
    assert select("margin", multi, 1, thresholds=(0.5, 0.5))[0].tolist() == [1]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_repeats_exactly_for_a_seed(strategy):
    probabilities, vectors = pool()
    first = select(strategy, probabilities, 10, vectors=vectors, labelled_vectors=vectors[:3], seed=7)
    again = select(strategy, probabilities.copy(), 10, vectors=vectors.copy(), labelled_vectors=vectors[:3], seed=7)
    assert np.array_equal(first[0], again[0]) and len(set(first[0].tolist())) == 10
    if strategy in ("random", "mixed"):
        assert not np.array_equal(first[0], select(strategy, probabilities, 10, seed=8)[0])


def test_diverse_spends_no_budget_on_near_copies_and_avoids_what_is_labelled():
    probabilities, vectors = pool(n=30, seed=1)
    probabilities[:6] = [1 / 3, 1 / 3, 1 / 3]  # six texts equally (and most) uncertain: four near-copies of one ...
    vectors[1:4] = vectors[0] + 1e-4
    vectors[1:4] /= np.linalg.norm(vectors[1:4], axis=1, keepdims=True)
    order, _ = select("uncertainty", probabilities, 3)
    assert set(order.tolist()) <= {0, 1, 2, 3}  # uncertainty alone takes three copies
    order, _ = select("diverse", probabilities, 3, vectors=vectors)
    candidates = set(np.argsort(-uncertainty(probabilities), kind="stable")[:12].tolist())  # the 4 x 3 most uncertain
    assert len(set(order.tolist()) & {0, 1, 2, 3}) == 1 and set(order.tolist()) <= candidates
    covered = select("diverse", probabilities, 3, vectors=vectors, labelled_vectors=vectors[[0]])[0]
    assert not set(covered.tolist()) & {0, 1, 2, 3}  # a text like one labelled already is covered


def test_mixed_takes_the_most_uncertain_half_and_a_random_half_alternating():
    probabilities, _ = pool(n=40, seed=2)
    ranked = select("uncertainty", probabilities, 40)[0].tolist()
    order = select("mixed", probabilities, 7, seed=3)[0].tolist()
    assert order[0::2] == ranked[:4]  # ceil(7 / 2) most uncertain, best first, at ranks 1, 3, 5, 7
    assert len(set(order)) == 7 and not set(order[1::2]) & set(ranked[:4])
    draws = {tuple(select("mixed", probabilities, 7, seed=s)[0][1::2].tolist()) for s in range(5)}
    assert len(draws) == 5  # the other half is the seed's draw of the rest
    assert select("mixed", probabilities, 1)[0].tolist() == ranked[:1]


def test_k_center_takes_the_farthest_point_each_time():
    points = np.array([[1.0, 0.0], [0.99, 0.141], [0.0, 1.0], [-1.0, 0.0]])
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    assert k_center(points, 3).tolist() == [0, 3, 2]
    assert k_center(points, 2, covered=points[[3]]).tolist() == [0, 2]


def test_a_budget_larger_than_the_pool_takes_the_pool():
    probabilities, vectors = pool(n=5)
    for strategy in STRATEGIES:
        assert sorted(select(strategy, probabilities, 50, vectors=vectors)[0].tolist()) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("head", ["linear", "prototype"])
def test_one_pass_gives_the_logits_and_vectors_two_passes_give(head, tokenizer):
    """select-texts' diverse strategy reads both from one pass through the encoder."""
    import paddle

    from conftest import features_of, synthetic_rows
    from paddle_ft.engine.evaluate import embed_rows, logits_and_vectors, predict_logits
    from paddle_ft.models.networks import BERTForTextClassification, scratch_encoder

    paddle.seed(3)
    encoder = scratch_encoder("bert", len(tokenizer.vocab), hidden_size=32, num_layers=2, num_heads=2,
                              intermediate_size=64, max_position_embeddings=64, dropout=0.1,
                              pad_token_id=tokenizer.pad_token_id)
    model = BERTForTextClassification(encoder, 2, dropout=0.3, pooling="mean", head=head)
    model.train()  # left in training mode: each way must switch dropout off itself
    features = features_of(synthetic_rows(40, seed=4), tokenizer)
    logits, vectors = logits_and_vectors(model, features, 8, tokenizer.pad_token_id)
    np.testing.assert_allclose(logits, predict_logits(model, features, 8, tokenizer.pad_token_id), atol=1e-5)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    np.testing.assert_allclose(unit, embed_rows(model, features, 8, tokenizer.pad_token_id), atol=1e-5)
