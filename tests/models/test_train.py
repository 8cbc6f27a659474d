import pytest
import torch
import torch.nn.functional as F
from torch import nn

from posenc.models import DistInfo, TrainConfig, lr_factor, train


def _problem():
    w_true = torch.tensor([[1.0, -2.0, 0.5]])

    def sample(step, gen):
        x = torch.randn(16, 3, generator=gen)
        return x, x @ w_true.T

    def loss_fn(model, batch):
        x, y = batch
        loss = F.mse_loss(model(x), y)
        return loss, {"rmse": float(loss.detach().sqrt())}

    return sample, loss_fn


def _run(seed, **kw):
    torch.manual_seed(seed)
    model = nn.Linear(3, 1)
    sample, loss_fn = _problem()
    calls = []
    cfg = TrainConfig(steps=60, lr=0.1, warmup_steps=5, grad_clip=None, eval_every=20, seed=seed, **kw)
    hist = train(model, sample, loss_fn, cfg, evaluate=lambda m: {"w0": float(m.weight[0, 0])},
                 progress=lambda s, n, m: calls.append((s, n)))
    return hist, calls


def test_training_is_seeded_and_records_every_step():
    h1, calls = _run(0)
    h2, _ = _run(0)
    h3, _ = _run(1)
    assert h1["loss"] == h2["loss"] and h1["loss"] != h3["loss"]
    assert len(h1["loss"]) == 60 and len(h1["metrics"]["rmse"]) == 60
    assert [e["step"] for e in h1["evals"]] == [20, 40, 60]
    assert calls == [(s, 60) for s in range(1, 61)]
    assert h1["loss"][-1] < 0.05 * h1["loss"][0]  # it learns
    assert h1["world_size"] == 1


def test_threads_are_set_and_restored():
    before = torch.get_num_threads()
    seen = []
    sample, loss_fn = _problem()

    def spy(model, batch):
        seen.append(torch.get_num_threads())
        return loss_fn(model, batch)

    train(nn.Linear(3, 1), sample, spy, TrainConfig(steps=2, threads=1))
    assert seen == [1, 1] and torch.get_num_threads() == before


def test_lr_schedule():
    cfg = TrainConfig(steps=100, warmup_steps=10)
    assert lr_factor(0, cfg) == 0.1 and lr_factor(9, cfg) == 1.0
    assert abs(lr_factor(99, cfg) - 0.1) < 0.01
    assert all(lr_factor(s + 1, cfg) <= lr_factor(s, cfg) + 1e-12 for s in range(10, 99))


def test_dist_info_reads_torchrun_env(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    info = DistInfo.from_env()
    assert (info.world_size, info.rank, info.local_rank, info.initialized) == (4, 2, 1, False)


def test_rank_changes_the_data_and_only_rank0_reports(monkeypatch):
    sample, loss_fn = _problem()
    first = {}

    def record(rank):
        def s(step, gen):
            batch = sample(step, gen)
            first.setdefault(rank, batch[0].clone())
            return batch
        return s

    calls = []
    monkeypatch.setenv("RANK", "1")
    train(nn.Linear(3, 1), record(1), loss_fn, TrainConfig(steps=2), progress=lambda *a: calls.append(a))
    monkeypatch.setenv("RANK", "0")
    train(nn.Linear(3, 1), record(0), loss_fn, TrainConfig(steps=2), progress=lambda *a: calls.append(a))
    assert not torch.equal(first[0], first[1])
    assert len(calls) == 2


def test_bad_config():
    import pytest

    sample, loss_fn = _problem()
    with pytest.raises(ValueError, match="steps"):
        train(nn.Linear(3, 1), sample, loss_fn, TrainConfig(steps=0))
    with pytest.raises(ValueError, match="lr"):
        train(nn.Linear(3, 1), sample, loss_fn, TrainConfig(lr=-1.0))


def test_ddp_wrapping_when_initialised(tmp_path):
    import torch.distributed as dist

    seen = []
    sample, loss_fn = _problem()

    def spy(model, batch):
        seen.append(type(model).__name__)
        return loss_fn(model, batch)

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = nn.Linear(3, 1)
        hist = train(model, sample, spy, TrainConfig(steps=3))
    finally:
        dist.destroy_process_group()
    assert seen == ["DistributedDataParallel"] * 3 and hist["world_size"] == 1
    assert len(hist["loss"]) == 3


def test_tiny_vit_learns_digits():
    from posenc.data.grid_tasks import digits_images
    from posenc.encodings import LearnableFourierEncoding
    from posenc.models import TinyViT

    data = digits_images(upsample=2, seed=0)
    torch.manual_seed(0)
    vit = TinyViT(patch_size=4, dim=32, num_heads=4, positions="continuous",
                  encoding=LearnableFourierEncoding(in_dim=2, num_features=32, gamma=0.5))

    def sample(step, gen):
        idx = torch.randint(len(data["y_train"]), (64,), generator=gen)
        return data["x_train"][idx], data["y_train"][idx]

    def loss_fn(model, batch):
        return F.cross_entropy(model(batch[0]), batch[1]), {}

    def evaluate(model):
        return {"acc": float((model(data["x_test"]).argmax(-1) == data["y_test"]).float().mean())}

    hist = train(vit, sample, loss_fn, TrainConfig(steps=150, lr=3e-3, warmup_steps=10), evaluate=evaluate)
    assert hist["evals"][-1]["acc"] > 0.5  # chance is 0.1


def test_parameter_groups_give_w_r_its_own_learning_rate():
    from posenc.encodings import LearnableFourierEncoding
    from posenc.models import TransformerEncoder, parameter_groups

    enc = LearnableFourierEncoding(in_dim=2, num_features=16, hidden_dim=8, gamma=0.5)
    model = TransformerEncoder(2, 1, dim=16, depth=1, num_heads=2, encoding=enc)
    groups = parameter_groups(model, 1e-3, {"w_r": 10.0, "absent": 3.0})
    by_name = {g["name"]: g for g in groups}
    assert set(by_name) == {"default", "w_r"}  # "absent" matches nothing: no empty group
    assert by_name["w_r"]["params"] == [enc.w_r] and by_name["w_r"]["lr"] == pytest.approx(1e-2)
    n_all = sum(1 for p in model.parameters() if p.requires_grad)
    assert len(by_name["default"]["params"]) == n_all - 1
    # "w_r" must match a whole dotted component, not a suffix of another name
    assert parameter_groups(model, 1e-3, {"r": 5.0})[0]["name"] == "default" and len(parameter_groups(model, 1e-3, {"r": 5.0})) == 1


def test_train_applies_lr_scales_first_adam_step_moves_w_r_by_scaled_lr():
    """Adam's first step moves every parameter by lr * sign(grad) (bias-corrected, eps aside)."""
    from posenc.encodings import LearnableFourierEncoding
    from posenc.models import TransformerEncoder

    def run(scales):
        enc = LearnableFourierEncoding(in_dim=2, num_features=16, hidden_dim=8, gamma=0.5)
        model = TransformerEncoder(2, 1, dim=16, depth=1, num_heads=2, encoding=enc)
        torch.manual_seed(0)
        model.head.reset_parameters()
        w0 = enc.w_r.detach().clone()
        pos = torch.rand(6, 2) * 2 - 1
        cfg = TrainConfig(steps=1, lr=1e-3, warmup_steps=1, grad_clip=None, lr_scales=scales)
        train(model, lambda s, g: torch.randn(4, 6, 2, generator=g),
              lambda net, b: (net(b, pos).pow(2).mean(), {}), cfg)
        return (enc.w_r.detach() - w0).abs()

    plain, scaled = run(()), run((("w_r", 10.0),))
    moved = plain > 0
    torch.testing.assert_close(plain[moved], torch.full_like(plain[moved], 1e-3), rtol=1e-3, atol=0)
    torch.testing.assert_close(scaled[moved], torch.full_like(scaled[moved], 1e-2), rtol=1e-3, atol=0)


def test_parameter_groups_bad_input():
    from posenc.models import parameter_groups

    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="lr_scales"):
        parameter_groups(model, 1e-3, {"weight": 0.0})
    with pytest.raises(ValueError, match="lr_scales"):
        parameter_groups(model, 1e-3, {"weight": float("inf")})
    with pytest.raises(TypeError, match="lr_scales"):
        parameter_groups(model, 1e-3, {3: 2.0})
    with pytest.raises(ValueError, match="lr"):
        parameter_groups(model, -1.0)
