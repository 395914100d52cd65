"""The default job's per-epoch backups: a kill at any point leaves ``latest`` naming only
complete, durable backups (issue 11, point 3).

Imports TensorFlow (a few seconds): the backups are real Keras ``BackupAndRestore``
directories of a tiny model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import REPO, load_module

pytestmark = pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer:UserWarning")

train = load_module("multiworker_train", REPO / "files" / "multiworker_train.py")
tf = train.tf


def tiny_model(seed: int = 1) -> Any:
    tf.keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.1), loss="mse")
    return model


def weights(model: Any) -> list[list[float]]:
    return [w.numpy().ravel().tolist() for w in model.weights]


@pytest.fixture
def model() -> Iterator[Any]:
    yield tiny_model()


def test_a_kill_while_an_epoch_is_written_again_keeps_latest_restorable(tmp_path: Path, model: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker one epoch ahead resumes from the epoch before and writes its epoch again;
    killed mid-write, it must still find the backup ``latest`` names."""
    backups = train.EpochBackups(str(tmp_path))
    backups.save(model, 1)
    model.layers[0].kernel.assign(model.layers[0].kernel + 1.0)
    backups.save(model, 2)
    saved = weights(model)
    assert backups.latest() == 2

    def killed(self: Any, epoch: int, logs: Any = None) -> None:
        os.makedirs(self.backup_dir if hasattr(self, "backup_dir") else tmp_path / "x", exist_ok=True)
        raise KeyboardInterrupt("killed while writing the backup")

    monkeypatch.setattr(tf.keras.callbacks.BackupAndRestore, "on_epoch_end", killed)
    with pytest.raises(KeyboardInterrupt):
        backups.save(tiny_model(seed=9), 2)
    monkeypatch.undo()

    again = train.EpochBackups(str(tmp_path))
    assert again.latest() == 2
    fresh = tiny_model(seed=5)
    again.restore(fresh, 2)
    assert weights(fresh) == saved
    again.restore(tiny_model(seed=6), 1)  # the epoch before is kept too


def test_every_file_of_a_backup_is_durable_before_latest_names_it(tmp_path: Path, model: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    synced: set[str] = set()
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        synced.add(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        if Path(dst).name == "latest":
            names = {line.split()[1] for line in Path(src).read_text().splitlines()}
            for name in names:
                for root, dirs, files in os.walk(tmp_path / name):
                    for entry in files + dirs:
                        path = os.path.join(root, entry)
                        if os.path.isfile(path):
                            assert path in synced, f"{path} not fsynced before latest names it"
                    assert root in synced, f"directory {root} not fsynced"
        real_replace(src, dst)

    monkeypatch.setattr(train.os, "fsync", fsync)
    monkeypatch.setattr(train.os, "replace", replace)
    backups = train.EpochBackups(str(tmp_path))
    backups.save(model, 1)
    backups.save(model, 2)
    assert backups.latest() == 2
    # Only the backups latest names are left.
    assert sorted(p.name.split("-")[1] for p in tmp_path.glob("epoch-*")) == ["1", "2"]


def test_a_pointer_of_the_earlier_format_is_read(tmp_path: Path, model: Any) -> None:
    backups = train.EpochBackups(str(tmp_path))
    backups.save(model, 1)
    name = backups.entries()[0][1]
    (tmp_path / name).rename(tmp_path / "epoch-1")
    (tmp_path / "latest").write_text("1\n")
    assert backups.latest() == 1
    backups.restore(tiny_model(seed=3), 1)


def test_the_evaluator_that_fell_behind_takes_the_newest_backup_when_the_one_it_read_is_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sidecar evaluator reads ``latest`` (epoch 2); before it restores, the chief's
    pushes bring epochs 3 and 4 and prune epoch 2's backup (as a loaded CI run showed). It
    restores from the directory it read, finds it gone, says so and evaluates the newest,
    instead of restoring nothing and failing with "holds epoch 0, not 2"."""
    def trained() -> Any:
        built, optimizer = train.build_model()
        built.compile(optimizer=optimizer, loss=tf.keras.losses.BinaryCrossentropy())
        optimizer.build(built.trainable_variables)
        return built

    chief = train.EpochBackups(str(tmp_path / "worker-0"))
    source = trained()
    for epoch in (1, 2):
        chief.save(source, epoch)
    real_restore = train.EpochBackups.restore
    overtaken: list[int] = []

    def overtaken_once(self: Any, model: Any, epoch: int, *rest: Any) -> None:
        if not overtaken:
            overtaken.append(epoch)
            for newer in (3, 4):
                chief.save(source, newer)
        real_restore(self, model, epoch, *rest)

    monkeypatch.setattr(train.EpochBackups, "restore", overtaken_once)
    args = train.parse_args(["--evaluate", "--epochs=4", "--backup-dir", str(tmp_path), "--evaluate-poll=0.01"])
    assert train.evaluate_main(args) == 0
    out = capsys.readouterr().out
    assert overtaken == [2]
    assert "evaluator skipped: the checkpoint of epoch 2 was replaced before it was read" in out, out
    assert "evaluator epoch=4 " in out and "evaluator epoch=2 " not in out, out
