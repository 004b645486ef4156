"""EarlyStopping says why it stopped in Lightning's words (issue 33), which ported scripts and tests match, and its
thresholds are Lightning's strict comparisons."""

from __future__ import annotations

import pytest

import trainer
from trainer.callbacks.early_stopping import EarlyStoppingReason
from trainer.exceptions import MisconfigurationException


def test_a_threshold_stop_is_named_as_lightning_names_it() -> None:
    stopper = trainer.EarlyStopping(monitor="val_loss", stopping_threshold=0.6)
    assert stopper._update(0.6) is False  # reaching the threshold is not enough: below it is (Lightning's `<`)
    assert stopper.stopping_reason_message is None and "improved" in stopper.reason
    assert stopper._update(0.5) is True
    assert stopper.stopping_reason is EarlyStoppingReason.STOPPING_THRESHOLD
    assert stopper.stopping_reason_message == (
        "Stopping threshold reached: val_loss = 0.5 < 0.6. Signaling Trainer to stop."
    )


def test_divergence_and_patience_are_named_as_lightning_names_them() -> None:
    diverging = trainer.EarlyStopping(monitor="acc", mode="max", divergence_threshold=0.2)
    assert diverging._update(0.2) is False and diverging._update(0.1) is True
    assert (
        diverging.stopping_reason_message == "Divergence threshold reached: acc = 0.1 < 0.2. Signaling Trainer to stop."
    )
    patient = trainer.EarlyStopping(monitor="val_loss", patience=2)
    assert patient._update(1.0) is False and patient._update(1.0) is False
    assert patient.stopping_reason_message is None  # set when it stops, as Lightning's
    assert patient._update(1.0) is True
    assert patient.stopping_reason_message == (
        "Monitored metric val_loss did not improve in the last 2 records. Best score: 1.000. Signaling Trainer to stop."
    )


def test_a_bad_mode_is_named_in_lightnings_words() -> None:
    with pytest.raises(MisconfigurationException, match="`mode` can be min, max, got middle"):
        trainer.EarlyStopping(monitor="val_loss", mode="middle")
