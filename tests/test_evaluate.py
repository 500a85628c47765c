"""What the trial measures: Algorithm 1 for the headline metrics, MC predictive for calibration, uncertainty,
test-protocol tags and the batch-size rule."""
import math

import pytest
import torch
from ndebench.datasets.registry import create_dataset
from ndebench.models.base import DataSpec
from ndebench.models.integrate import SolverConfig, TrialRNG
from ndebench.models.registry import create_model
from ndebench.platform.common.metrics import classification_metrics
from ndebench.platform.worker.build import Feed, resolve_batch_size
from ndebench.platform.worker.evaluation import evaluate, protocol_tag
from ndebench.regularizers.registry import create_regularizer


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def fixed_model(name, regularizer, *, num_classes, binary=False, **params):
    bundle = create_dataset("synthetic", seed=0, num_samples=60)
    torch.manual_seed(0)
    model = create_model(
        name, DataSpec(bundle.channels, num_classes, binary, times=bundle.times), hidden_size=8,
        regularizer=create_regularizer(regularizer, **params), solver=SolverConfig("euler"),
    )
    feed = Feed(model, bundle, bundle.test, torch.device("cpu"))
    if binary:
        feed.targets = feed.targets % 2
    return model, feed


def reference_prediction(model, feed, seed=0):
    model.eval()
    return model.predict(feed.inputs, TrialRNG.for_evaluation(seed))


def test_top5_comes_from_the_head_on_the_mean_latent():
    model, feed = fixed_model("neural_cde", "continuum_dropout", num_classes=100, p=0.5, m=5)
    metrics, _ = evaluate(model, feed, batch_size=len(feed), seed=0, top5=True)
    pred = reference_prediction(model, feed)
    algorithm1 = classification_metrics(pred.probs, feed.targets, pred.logits, top5=True)
    mc_probs = classification_metrics(pred.probs, feed.targets, top5=True)
    assert metrics["top5_accuracy"] == algorithm1["top5_accuracy"]
    assert metrics["accuracy"] == algorithm1["accuracy"]
    assert metrics["nll"] == mc_probs["nll"] and metrics["ece"] == mc_probs["ece"]
    # The two predictors really differ on this model, so the test tells them apart.
    assert (pred.logits.topk(5).indices.sort().values != pred.probs.topk(5).indices.sort().values).any()


def test_auroc_comes_from_the_head_on_the_mean_latent():
    model, feed = fixed_model("neural_lsde", "continuum_dropout", num_classes=2, binary=True, p=0.5, m=5)
    metrics, _ = evaluate(model, feed, batch_size=len(feed), seed=0)
    pred = reference_prediction(model, feed)
    assert metrics["auroc"] == classification_metrics(pred.probs, feed.targets, pred.logits)["auroc"]
    order_logit, order_probs = pred.logits[:, 0].argsort(), pred.probs[:, 0].argsort()
    assert not torch.equal(order_logit, order_probs)


def test_jump_diffusion_ttn_predicts_from_the_averaged_softmax():
    model, feed = fixed_model("neural_cde", "jump_diffusion_ttn", num_classes=3, rate=0.5)
    metrics, _ = evaluate(model, feed, batch_size=len(feed), seed=0)
    pred = reference_prediction(model, feed)
    assert metrics["accuracy"] == classification_metrics(pred.probs, feed.targets)["accuracy"]


def test_uncertainty_is_logged_and_zero_for_one_deterministic_pass():
    model, feed = fixed_model("neural_cde", "continuum_dropout", num_classes=3, p=0.3, m=10)
    metrics, _ = evaluate(model, feed, batch_size=16, seed=0)
    pred = reference_prediction(model, feed)
    assert metrics["z_cov_trace"] == pytest.approx(float(pred.z_var.sum(1).mean()), rel=1e-5)
    assert metrics["z_cov_trace"] > 0 and 0 < metrics["predictive_entropy"] <= math.log(3)
    plain, feed = fixed_model("neural_cde", "none", num_classes=3)
    assert evaluate(plain, feed, batch_size=16, seed=0)[0]["z_cov_trace"] == 0.0


@pytest.mark.parametrize("model_name,regularizer,params,tag", [
    ("neural_cde", "none", {}, "deterministic"),
    ("neural_cde", "none", {"n_mc": 5}, "deterministic"),
    ("neural_lsde", "none", {}, "stochastic-1"),
    ("neural_lsde", "none", {"n_mc": 5}, "mc5"),
    ("neural_cde", "continuum_dropout", {"n_mc": 1}, "stochastic-1"),
    ("neural_cde", "continuum_dropout", {}, "mc5"),
    ("neural_cde", "jump_diffusion", {}, "deterministic"),
])
def test_protocol_tags_tell_the_truth(model_name, regularizer, params, tag):
    model, _ = fixed_model(model_name, regularizer, num_classes=3, **params)
    assert protocol_tag(model) == tag


def test_none_with_mc_passes_averages_the_brownian_noise():
    one, feed = fixed_model("neural_lsde", "none", num_classes=3)
    five, _ = fixed_model("neural_lsde", "none", num_classes=3, n_mc=5)
    assert evaluate(one, feed, batch_size=len(feed), seed=0)[0]["z_cov_trace"] == 0.0
    assert evaluate(five, feed, batch_size=len(feed), seed=0)[0]["z_cov_trace"] > 0.0
    pred = reference_prediction(five, feed)
    assert torch.allclose(pred.logits, five.head(pred.z_mean))


# (train, test) sizes of the archive: timeseriesclassification.com data set pages.
TABLE_2_SETS = {"SmoothSubspace": (150, 150), "ArticularyWordRecognition": (275, 300), "ERing": (30, 270),
                "RacketSports": (151, 152)}


@pytest.mark.parametrize("name", sorted(TABLE_2_SETS))
def test_batch_size_rule_on_the_table_2_sets(name, tmp_path):
    """The reference rule on N = train + test: 128 on all four (the training split alone gave 64 on three)."""
    from fakes import write_ts

    n_train, n_test = TABLE_2_SETS[name]
    for split, n in (("TRAIN", n_train), ("TEST", n_test)):
        labels = ["a", "b", "c"] * (n // 3) + ["a", "b", "c"][: n % 3]
        samples = [[[float(i), float(i + 1), float(i + 2)]] for i in range(n)]
        write_ts(tmp_path / name / f"{name}_{split}.ts", samples, labels)
    bundle = create_dataset(f"uea/{name}", seed=0, data_dir=tmp_path)
    assert bundle.num_samples == n_train + n_test
    assert resolve_batch_size("auto", bundle) == 128
    assert resolve_batch_size(32, bundle) == 32


def test_training_skips_a_last_batch_of_one_sample():
    """The head's BatchNorm cannot train on one sample; evaluation still sees every sample."""
    model, feed = fixed_model("neural_cde", "none", num_classes=3)
    n = len(feed)
    sizes = [len(y) for _, y in feed.batches(n - 1, torch.Generator().manual_seed(0))]
    assert sizes == [n - 1]
    assert [len(y) for _, y in feed.batches(n - 1, None)] == [n - 1, 1]
