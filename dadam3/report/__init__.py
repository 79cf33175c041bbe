"""The reproduction report: ``make report`` (``python -m dadam3.report``) reads the committed run
directories under ``results/`` and writes ``results/REPORT.md`` with its figures in
``results/report/`` — one section per paper figure and per extra experiment, each with what the
paper claims, what was run (settings and provenance, "unknown" where not recorded), the table
(mean ± sample SD, n), the curves and a verdict computed from the numbers.

Modules: :mod:`~dadam3.report.read` and :mod:`~dadam3.report.validate` (every file of a run
decoded and checked once per build), :mod:`~dadam3.report.runs` (a run directory, the build's
snapshot), :mod:`~dadam3.report.plan` (the analysis plans in ``docs/analysis_plan/``),
:mod:`~dadam3.report.families` (a plan's search, queue, environment rules and verdicts),
:mod:`~dadam3.report.multiplicity` (the words, p-values and Holm), :mod:`~dadam3.report.stats`
(cells, paired intervals), :mod:`~dadam3.report.evidence` (round 2's selection, now history),
:mod:`~dadam3.report.figures`, :mod:`~dadam3.report.common` (shared markdown),
:mod:`~dadam3.report.sections_plan`, :mod:`~dadam3.report.sections_paper` and
:mod:`~dadam3.report.sections_fmnist`, :mod:`~dadam3.report.glance`, :mod:`~dadam3.report.build`
(the whole file, stale files removed).
"""
