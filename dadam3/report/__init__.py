"""The reproduction report: ``make report`` (``python -m dadam3.report``) reads the committed run
directories under ``results/`` and writes ``results/REPORT.md`` with its figures in
``results/report/`` — one section per paper figure and per extra experiment, each with what the
paper claims, what was run (settings and provenance, "unknown" where not recorded), the table
(mean ± sample SD, n), the curves and a verdict computed from the numbers.

Modules: :mod:`~dadam3.report.runs` (a run directory), :mod:`~dadam3.report.stats` (cells, best
step size, verdicts), :mod:`~dadam3.report.figures`, :mod:`~dadam3.report.common` (shared
markdown), :mod:`~dadam3.report.sections_paper` and :mod:`~dadam3.report.sections_fmnist`,
:mod:`~dadam3.report.build` (the whole file, stale files removed).
"""
