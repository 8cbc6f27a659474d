"""Dict batches (Hugging Face style) and variable-length padded sequences in the search functions:
the same numbers as the tensor path, padding that changes nothing, and clear refusals."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from posenc.search import Batches, choose_encoding, evaluate, train_network, with_encoding
from posenc.search.batches import call_model, logits_of


class Tok(nn.Module):
    """Tokens -> class logits; takes its inputs as keywords, optionally masked, and answers a dict."""

    def __init__(self, vocab=9, dim=16, classes=4, kind="tensor"):
        super().__init__()
        self.kind = kind
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Identity()
        layer = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, input_ids, attention_mask=None):
        h = self.pos(self.embed(input_ids))
        if attention_mask is None:
            logits = self.head(self.encoder(h).mean(1))
        else:
            h = self.encoder(h, src_key_padding_mask=attention_mask == 0)
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            logits = self.head((h * m).sum(1) / m.sum(1))
        return {"logits": logits} if self.kind == "dict" else logits


class Positional(Tok):  # the tensor call of the same model
    def forward(self, x):  # noqa: D102
        return super().forward(x)


def _data(n=96, length=8, seed=0, classes=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, classes, (n, length), generator=g)
    return x, x[:, 0].clone()


def test_dict_epoch_and_stream_are_the_tensor_pairs_batches():
    x, y = _data()
    mask = torch.ones_like(x)
    a, b = Batches("train", (x, y)), Batches("train", {"input_ids": x, "attention_mask": mask, "labels": y})
    for (xa, ya), (xb, yb) in zip(a.epoch(20), b.epoch(20)):
        assert torch.equal(xa, xb["input_ids"]) and torch.equal(ya, yb) and xb["attention_mask"].shape == xa.shape
    ga, gb = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    sa, sb = a.stream(32, ga), b.stream(32, gb)
    for _ in range(7):  # over two epochs: the same permutations
        (xa, ya), (xb, yb) = next(sa), next(sb)
        assert torch.equal(xa, xb["input_ids"]) and torch.equal(ya, yb)
    assert b.num_examples == 96 and b.batches_per_epoch(20) == 5


def test_training_on_dicts_is_bit_for_bit_the_tensor_training():
    x, y = _data()
    torch.manual_seed(0)
    m1 = Positional()
    m2 = Tok(kind="dict")
    m2.load_state_dict(m1.state_dict())
    kw = {"steps": 12, "batch_size": 16, "seed": 5, "lr": 0.05}
    train_network(m1, (x, y), **kw)
    train_network(m2, ({"input_ids": x}, y), **kw)  # a pair whose inputs are a dict
    for (k, p1), p2 in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(p1, p2), k
    assert evaluate(m1, (x, y)) == evaluate(m2, {"input_ids": x, "labels": y})


def test_dict_batches_from_a_loader_with_label_or_labels():
    x, y = _data()
    torch.manual_seed(0)
    m = Tok(kind="dict")
    rows = [{"input_ids": x[i], "label": y[i]} for i in range(len(y))]
    loss, acc = evaluate(m, DataLoader(rows, batch_size=32))
    ref_loss, ref_acc = evaluate(m, {"input_ids": x, "labels": y}, batch_size=32)
    assert acc == ref_acc and loss == pytest.approx(ref_loss, rel=1e-6)


def _padded(seqs, pad=8):
    longest = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), longest), pad)
    mask = torch.zeros(len(seqs), longest, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)], mask[i, :len(s)] = s, 1
    return ids, mask


@pytest.mark.parametrize("candidate", ["learned_table", "sinusoidal", "cape", "rope", "xpos", "alibi", "t5",
                                       "kernelized", "rope+learned_table"])
def test_padding_changes_nothing_for_every_family(candidate):
    """A sequence padded at its end (masked) gets the logits it gets alone, whatever the encoding."""
    torch.manual_seed(0)
    model = with_encoding(Tok(), candidate, encoding_at="pos", max_len=16, dim=16, seed=0).eval()
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 8, (n,), generator=g) for n in (5, 12, 9)]
    ids, mask = _padded(seqs)
    with torch.no_grad():
        together = model(ids, mask)
        for i, s in enumerate(seqs):
            alone = model(s[None], torch.ones(1, len(s), dtype=torch.long))
            torch.testing.assert_close(together[i], alone[0], rtol=1e-5, atol=1e-5)


def test_the_race_chooses_on_padded_variable_length_dict_batches():
    g = torch.Generator().manual_seed(0)

    def rows(n):
        out = []
        for _ in range(n):
            s = torch.randint(0, 4, (int(torch.randint(6, 13, (1,), generator=g)),), generator=g)
            out.append({"input_ids": s, "labels": s[0]})
        return out

    def collate(items):
        ids, mask = _padded([it["input_ids"] for it in items])
        return {"input_ids": ids, "attention_mask": mask, "labels": torch.stack([it["labels"] for it in items])}

    train = DataLoader(rows(512), batch_size=32, shuffle=True, collate_fn=collate,
                       generator=torch.Generator().manual_seed(0))
    val, test = (DataLoader(rows(128), batch_size=64, collate_fn=collate) for _ in range(2))
    torch.manual_seed(0)
    model = Tok(kind="dict")
    sel = choose_encoding(model, train, val, candidates=["none", "learned_table"], encoding_at="pos",
                          epochs=10, budget=2.0, seed=0)
    assert sel.choices == {"encoding": "learned_table"}
    assert sel.rebuild["max_len"] == 12  # the longest sequence of the first training batch and of val
    assert evaluate(model, test)[1] > 0.9


def test_logits_of_and_call_model():
    t = torch.ones(2, 3)

    class HasLogits:
        logits = t

    assert logits_of(t) is t and logits_of({"logits": t, "loss": 0}) is t and logits_of(HasLogits()) is t
    assert logits_of((t,)) == (t,)  # anything else is given to the loss as it is
    m = Tok(kind="dict")
    x = torch.zeros(1, 4, dtype=torch.long)
    assert torch.equal(call_model(m, {"input_ids": x})["logits"], m(x)["logits"])


@pytest.mark.parametrize("data, err, words", [
    ({"input_ids": torch.zeros(4, 3, dtype=torch.long)}, ValueError, ["train", "'labels'", "input_ids"]),
    ({"labels": torch.zeros(4, dtype=torch.long)}, ValueError, ["train", "only its targets"]),
    ({"input_ids": [1, 2], "labels": torch.zeros(2, dtype=torch.long)}, TypeError, ["train", "input_ids"]),
    (({"input_ids": torch.zeros(4, 3, dtype=torch.long), "attention_mask": torch.ones(3, 3)},
      torch.zeros(4, dtype=torch.long)), ValueError, ["train", "inputs['attention_mask']", "(3, 3)"]),
    (({"x": torch.tensor([[0.0], [float("nan")]])}, torch.zeros(2, dtype=torch.long)), ValueError,
     ["train", "inputs['x']", "finite"]),
    (({"x": torch.zeros(0, 3)}, torch.zeros(0, dtype=torch.long)), ValueError, ["train", "empty"]),
])
def test_bad_dict_data_is_refused_naming_the_argument(data, err, words):
    with pytest.raises(err) as info:
        Batches("train", data)
    for w in words:
        assert w in str(info.value)


def test_a_bad_dict_batch_in_a_loader_is_named_with_its_index():
    x, y = _data(8)
    loader = [{"input_ids": x[:4], "labels": y[:4]}, {"input_ids": x[4:]}]
    m = Tok(kind="dict")
    with pytest.raises(ValueError, match=r"val \(batch 1\).*labels"):
        evaluate(m, Batches("val", loader))
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(ValueError, match="train"):
        choose_encoding(m, loader, (x, y), candidates=["none", "learned_table"], encoding_at="pos", steps=4)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())  # a refused call changes nothing


class _Flat(nn.Module):
    def __init__(self):
        super().__init__()
        self.e, self.pos, self.h = nn.Linear(3, 8), nn.Identity(), nn.Linear(8, 2)

    def forward(self, x):
        return self.h(self.pos(self.e(x).unsqueeze(1).expand(-1, 4, -1)).mean(1))


@pytest.mark.parametrize("entries, err, words", [
    ({"x": torch.randn(16, 3).long()}, RuntimeError, ["'x' shape (16, 3), torch.int64, on cpu", "mat1"]),
    ({"x": torch.randn(16, 3).half()}, TypeError, ["torch.float32, not ['x']", ".to(torch.float32)"]),
    ({"z": torch.randn(16, 3)}, TypeError, ["model(**inputs)", "['z']", "unexpected keyword argument 'z'"]),
])
def test_a_dict_the_model_cannot_take_is_explained_naming_train(entries, err, words):
    y = torch.randint(0, 2, (16,))
    model = _Flat()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(err) as info:
        choose_encoding(model, {**entries, "labels": y}, (torch.randn(16, 3), y), candidates=["none", "learned_table"],
                        encoding_at="pos", steps=4)
    msg = str(info.value)
    assert msg.startswith("train: ")
    for w in words:
        assert w in msg
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
