import pytest
import torch
from torch import nn

from posenc.search import (
    MixedOp,
    arch_parameters,
    batch_statistics,
    evaluate,
    make_finetune,
    mixed_ops,
    search_space,
    train_darts,
    train_network,
    weight_parameters,
)
from posenc.search.supernet import cosine_lr

from ._known import Chain, data


class Trainable(nn.Module):
    """One edge: 'lin' (learnable, can fit the target) vs 'none'; target = fixed linear map."""

    def __init__(self):
        super().__init__()
        self.edge = MixedOp({"none": nn.Identity(), "lin": nn.Linear(10, 10)}, alpha_init="zeros")

    def forward(self, x):
        return self.edge(x)


def test_edges_and_parameter_split():
    model = Chain()
    assert list(mixed_ops(model)) == ["edges.0", "edges.1", "edges.2"]
    assert search_space(model)["edges.1"] == ("none", "skip", "noise_a", "noise_b")
    arch = arch_parameters(model)
    assert [p is e.alpha for p, e in zip(arch, model.edges)] == [True] * 3
    w = weight_parameters(model)
    assert {id(p) for p in w} | {id(p) for p in arch} == {id(p) for p in model.parameters()}
    assert not {id(p) for p in w} & {id(p) for p in arch}


def test_evaluate_matches_direct_computation_and_restores_mode():
    model, (x, y) = Chain(), data(100)
    model.train()
    loss, acc = evaluate(model, (x, y), batch_size=7)
    with torch.no_grad():
        out = model(x)
    assert loss == pytest.approx(nn.functional.cross_entropy(out, y).item(), rel=1e-5)
    assert acc == pytest.approx((out.argmax(-1) == y).float().mean().item())
    assert model.training


def test_train_darts_moves_alpha_towards_the_useful_op_and_fixed_alpha_keeps_it():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 10, generator=g)
    y = (x @ torch.randn(10, 10, generator=g)).argmax(-1)  # needs 'lin'
    torch.manual_seed(0)
    model = Trainable()
    hist = train_darts(model, (x[:128], y[:128]), (x[128:], y[128:]), steps=150, batch_size=32,
                       lr=0.1, a_lr=0.05, seed=0)
    assert len(hist["train_loss"]) == len(hist["val_loss"]) == 150
    assert sum(hist["train_loss"][-10:]) < sum(hist["train_loss"][:10])
    w = hist["alpha"]["edge"]
    assert w[1] > w[0]
    torch.manual_seed(0)
    fixed = Trainable()
    hist = train_darts(fixed, (x[:128], y[:128]), (x[128:], y[128:]), epochs=2, batch_size=32, fixed_alpha=True)
    assert hist["steps"] == 8 and hist["val_loss"] == []
    assert torch.equal(fixed.edge.alpha.detach(), torch.zeros(2))
    assert fixed.edge.alpha.requires_grad


def test_train_darts_is_deterministic_and_reports_progress():
    def run():
        torch.manual_seed(1)
        model = Trainable()
        seen = []
        train_darts(model, data(64), data(64, seed=1), steps=5, batch_size=16, a_lr=0.1, seed=3,
                    progress=lambda s, t, info: seen.append((s, t, sorted(info))))
        return model.edge.alpha.detach().clone(), seen

    a1, s1 = run()
    a2, _ = run()
    assert torch.equal(a1, a2)
    assert s1[-1] == (5, 5, ["train_loss", "val_loss"])


def test_finetune_trains_discretised_model():
    torch.manual_seed(0)
    model = Trainable()
    model.edge.discretize("lin")
    before = model.edge.ops["lin"].weight.detach().clone()
    make_finetune(data(64), data(64, seed=1), epochs=1, batch_size=16)(model)
    assert not torch.equal(before, model.edge.ops["lin"].weight)
    assert torch.equal(model.edge.alpha.detach(), torch.zeros(2))  # a decided edge's alpha takes no step


def test_train_network_is_the_weight_half_of_train_darts():
    tr, va = data(96), data(64, seed=1)
    torch.manual_seed(0)
    a = Trainable()
    torch.manual_seed(0)
    b = Trainable()
    before = evaluate(b, tr)[0]
    ha = train_darts(a, tr, va, steps=12, batch_size=16, lr=0.1, fixed_alpha=True, seed=5)
    hb = train_network(b, tr, steps=12, batch_size=16, lr=0.1, seed=5)
    assert ha["train_loss"] == hb["train_loss"]
    assert evaluate(b, tr)[0] < before
    plain = nn.Sequential(nn.Linear(10, 10))
    h = train_network(plain, tr, epochs=1, batch_size=32, optimizer="adamw", lr=1e-2)
    assert h["steps"] == 3
    with pytest.raises(ValueError, match="optimizer"):
        train_network(plain, tr, steps=1, optimizer="lbfgs")
    with pytest.raises(ValueError, match="train is empty"):
        train_network(plain, (tr[0][:0], tr[1][:0]), steps=1)


def test_bad_input():
    x, y = data(32)
    with pytest.raises(ValueError, match="no mixed edges"):
        mixed_ops(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no mixed edges"):
        train_darts(nn.Linear(10, 10), (x, y), (x, y), steps=1)
    with pytest.raises(ValueError, match="val is empty"):
        train_darts(Chain(), (x, y), (x[:0], y[:0]), steps=1)
    with pytest.raises(ValueError, match="train"):
        train_darts(Chain(), (x, y[:4]), (x, y), steps=1)
    with pytest.raises(ValueError, match="exactly one of steps and epochs"):
        train_darts(Chain(), (x, y), (x, y))
    with pytest.raises(ValueError, match="steps"):
        train_darts(Chain(), (x, y), (x, y), steps=-1)
    with pytest.raises(ValueError, match="epochs"):
        train_darts(Chain(), (x, y), (x, y), epochs=-2)
    with pytest.raises(ValueError, match="epochs"):
        make_finetune((x, y), (x, y), epochs=-1)
    with pytest.raises(ValueError, match="data is empty"):
        evaluate(Chain(), (x[:0], y[:0]))
    with pytest.raises(TypeError, match="data"):
        evaluate(Chain(), x)
    with pytest.raises(ValueError, match="finite"):
        evaluate(Chain(), (torch.full_like(x, float("nan")), y))
    with pytest.raises(ValueError, match="bn"):
        evaluate(Chain(), (x, y), bn="train")
    with pytest.raises(ValueError, match="lr_min must not exceed lr"):
        train_darts(Chain(), (x, y), (x, y), steps=1, lr=0.01, lr_min=0.1)
    with pytest.raises(TypeError, match="a_optimizer"):
        train_darts(Chain(), (x, y), (x, y), steps=1, a_optimizer="adam")


def test_cosine_schedule_matches_torch_stepped_per_epoch_to_the_minimum():
    # the authors' CosineAnnealingLR(T_max=epochs, eta_min=0.001), stepped once per epoch
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.025)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 7, eta_min=0.001)
    at = cosine_lr(0.025, 0.001, steps=7 * 3, per_epoch=3)
    for epoch in range(7):
        for k in range(3):
            assert at(3 * epoch + k) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12)
        opt.step()
        sched.step()


def test_batch_statistics_use_the_batch_and_leave_running_stats_alone():
    bn = nn.BatchNorm1d(3)
    bn.running_mean.fill_(5.0)
    bn.eval()
    x = torch.randn(16, 3, dtype=torch.float32)
    with batch_statistics(bn):
        out = bn(x)
    ref = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + bn.eps)
    torch.testing.assert_close(out, ref)
    assert torch.equal(bn.running_mean, torch.full((3,), 5.0)) and not bn.training
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    model.eval()
    d = (torch.randn(32, 3), torch.randint(0, 3, (32,)))
    assert evaluate(model, d, 32, bn="batch") != evaluate(model, d, 32, bn="eval")


def test_dataloader_input_equals_tensor_input():
    from torch.utils.data import DataLoader, TensorDataset

    x, y = data(100)
    loader = DataLoader(TensorDataset(x, y), batch_size=7, shuffle=False)
    model = Chain()
    assert evaluate(model, loader) == pytest.approx(evaluate(model, (x, y), batch_size=7), rel=1e-6)
    assert evaluate(model, list(loader)) == pytest.approx(evaluate(model, (x, y), batch_size=7), rel=1e-6)
    # training on a loader: one pass over it is one epoch
    torch.manual_seed(0)
    m1 = Trainable()
    hist = train_darts(m1, loader, DataLoader(TensorDataset(x, y), batch_size=10, shuffle=True), epochs=2)
    assert hist["steps"] == 2 * len(loader) == len(hist["val_loss"])
    h = train_network(Trainable(), loader, steps=5)
    assert len(h["train_loss"]) == 5
    with pytest.raises(TypeError, match="batch 0"):
        evaluate(model, [x, y, x])  # a list of three tensors is not a list of (x, y) batches
    with pytest.raises(TypeError, match="re-iterable"):
        evaluate(model, iter(loader))
    with pytest.raises(ValueError, match="empty"):
        evaluate(model, [])


def test_a_diverging_run_raises_instead_of_returning_nan_alpha():
    torch.manual_seed(0)
    model = Trainable()
    with pytest.raises(FloatingPointError, match="diverged at step"):
        train_darts(model, data(64), data(64, seed=1), steps=30, batch_size=16, lr=1e12, grad_clip=None)
    model = Trainable()
    with torch.no_grad():
        model.edge.alpha.fill_(float("nan"))
    with pytest.raises(ValueError, match="not finite"):
        train_darts(model, data(64), data(64, seed=1), steps=1)
