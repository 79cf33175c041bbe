"""The config schema, declared once: dataclasses registered as Hydra structured configs.

* :mod:`dadam3.run.schema.runs` — the two entry points' schemas (``train``, ``synthetic``) and
  their fixed sections (``loop``, ``metrics``, ``cuda``, ``distributed``, ``game``);
  :mod:`dadam3.run.schema.groups` — one schema per kind of group option (data sets, nets,
  topologies, loggers, optimizers: an optimizer's fields are its algorithm class's ``HPARAMS``,
  :mod:`dadam3.optim`).
* Each field declares its default, its check and whether it may change on resume
  (:func:`dadam3.run.schema.fields.knob`); the YAML files in ``configs/`` name their schema
  in ``defaults:`` and set only what is not a default.
* :func:`train_settings` / :func:`synthetic_settings` (:mod:`dadam3.run.schema.settings`) turn a
  composed config into the checked, frozen schema objects (the runs' settings); :func:`compose` and
  :func:`check_overrides` refuse an unknown or meaningless key with one line before Hydra
  composes (:mod:`dadam3.run.schema.overrides`); :func:`may_change_on_resume` is the resume policy.
"""
from __future__ import annotations

from dadam3.run.schema.presets import register
from dadam3.run.schema.overrides import check_overrides, compose, config_error, merged_overrides
from dadam3.run.schema.runs import LoopSettings, SyntheticConfig, TrainConfig
from dadam3.run.schema.settings import may_change_on_resume, synthetic_settings, train_settings

__all__ = ["TrainConfig", "SyntheticConfig", "LoopSettings", "train_settings",
           "synthetic_settings", "may_change_on_resume", "register", "compose", "check_overrides",
           "config_error", "merged_overrides"]

register()
