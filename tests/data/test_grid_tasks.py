import math

import pytest
import torch

from posenc.data.grid_tasks import (
    cell_coords,
    digits_images,
    grid_cells,
    grid_radius_task,
    in_box,
    point_set_task,
)


@pytest.mark.parametrize("metric", ["l2", "linf"])
def test_grid_labels_match_loop_reference(metric):
    d = grid_radius_task(5, torch.Generator().manual_seed(0), grid=6, radius=2.0, metric=metric)
    tokens, labels, marker = d["tokens"], d["labels"], d["marker"]
    for b in range(5):
        mr, mc = divmod(int(marker[b]), 6)
        assert tokens[b, marker[b], 1] == 1 and tokens[b, :, 1].sum() == 1
        assert tokens[b, marker[b], 0] == 0  # the marker cell is never occupied
        for i in range(36):
            r, c = divmod(i, 6)
            dist = math.hypot(r - mr, c - mc) if metric == "l2" else max(abs(r - mr), abs(c - mc))
            want = float(tokens[b, i, 0] == 1 and dist <= 2.0)
            assert labels[b, i] == want


def test_disk_and_square_differ_and_seeded():
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    disk = grid_radius_task(64, g(), grid=8, radius=2.0, metric="l2")
    square = grid_radius_task(64, g(), grid=8, radius=2.0, metric="linf")
    assert torch.equal(disk["tokens"], square["tokens"])  # same draws
    assert (square["labels"] >= disk["labels"]).all() and (square["labels"] > disk["labels"]).any()
    assert torch.equal(grid_radius_task(64, g(), grid=8)["labels"], grid_radius_task(64, g(), grid=8)["labels"])


def test_cells_and_coords():
    assert grid_cells(3)[4].tolist() == [1, 1]
    torch.testing.assert_close(cell_coords(2), torch.tensor([[-0.5, -0.5], [-0.5, 0.5], [0.5, -0.5], [0.5, 0.5]]))


def test_point_set_task_respects_the_held_out_box():
    box = (0.2, 1.0, 0.2, 1.0)
    d = point_set_task(50, torch.Generator().manual_seed(0), num_points=20, exclude=box)
    assert not in_box(d["positions"], box).any()
    full = point_set_task(200, torch.Generator().manual_seed(0), num_points=20)
    assert in_box(full["positions"], box).any()
    pos, lab, tok = d["positions"], d["labels"], d["tokens"]
    dist = (pos - pos[:, :1]).norm(dim=-1)
    torch.testing.assert_close(lab, ((tok[..., 0] == 1) & (dist <= 0.6)).float())
    assert (tok[:, 0, 1] == 1).all() and (tok[:, 0, 0] == 0).all()


def test_digits():
    d = digits_images(upsample=2, test_fraction=0.25, seed=0)
    assert d["x_train"].shape[1:] == (1, 16, 16) and d["x_train"].max() <= 1.0
    assert len(d["y_train"]) + len(d["y_test"]) == 1797
    assert set(d["y_test"].tolist()) == set(range(10))


def test_bad_task_arguments():
    g = torch.Generator()
    with pytest.raises(ValueError, match="metric"):
        grid_radius_task(2, g, metric="l1")
    with pytest.raises(ValueError, match="radius"):
        grid_radius_task(2, g, radius=0.0)
    with pytest.raises(ValueError, match="occupancy"):
        grid_radius_task(2, g, occupancy=1.5)
    with pytest.raises(ValueError, match="exclude"):
        point_set_task(2, g, exclude=(-1.0, 1.0, -1.0, 1.0))
    with pytest.raises(ValueError, match="test_fraction"):
        digits_images(test_fraction=1.0)
