"""Run by tests/models/test_train_ddp.py under ``torchrun --nproc_per_node=2``.

Trains a tiny testbed transformer with :func:`posenc.models.train` (which must set
up the gloo process group itself) and lets rank 0 alone write the parameters, the
per-rank first batches and the history.
"""

import json
import sys

import torch
import torch.nn.functional as F


def problem():
    from posenc.models import TransformerEncoder

    torch.manual_seed(0)
    model = TransformerEncoder(in_features=3, out_features=2, dim=16, depth=1, num_heads=2)

    def sample(step, gen):
        x = torch.randn(4, 5, 3, generator=gen)
        return x, x[..., :2].sum(-1, keepdim=True).expand(-1, -1, 2) * torch.tensor([1.0, -0.5])

    def loss_fn(model, batch):
        x, y = batch
        loss = F.mse_loss(model(x), y)
        return loss, {"mse": float(loss.detach())}

    return model, sample, loss_fn


if __name__ == "__main__":
    from posenc.models import TrainConfig, train

    out = sys.argv[1]
    torch.set_num_threads(1)
    model, sample, loss_fn = problem()
    calls = []
    hist = train(model, sample, loss_fn, TrainConfig(steps=4, lr=1e-2, warmup_steps=1, seed=3),
                 progress=lambda s, n, m: calls.append(s))
    import torch.distributed as dist

    assert dist.is_initialized() and dist.get_world_size() == 2
    if hist["rank"] == 0:
        torch.save({"params": {k: v.detach().clone() for k, v in model.state_dict().items()},
                    "history": hist}, f"{out}/rank0.pt")
        with open(f"{out}/progress0.json", "w") as fh:
            json.dump(calls, fh)
    else:
        with open(f"{out}/progress1.json", "w") as fh:
            json.dump(calls, fh)
    # Both ranks reach the end, then leave without tearing gloo down: under load, destroying the
    # group (or letting the interpreter destroy it at exit) aborted a rank with "terminate called
    # without an active exception", a gloo thread still joinable when its object is destroyed,
    # even after a barrier. Every file is written and closed above; os._exit skips the destructors.
    import os

    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
