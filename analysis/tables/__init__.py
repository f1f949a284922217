"""The report's tables, one module per question of the study: which framework is faster
(speed), how far each scales (scaling), what loader workers and batch size do (axes), where a
step's time goes and the steady state (steps), whether both learn the same (accuracy), the seed
study's Table 2 (paper) and why its harness saw what it saw (study), and the memory model
against the measured peak (memory); grids holds the layouts they share.

Every table is an `analysis.display.TableSet`: a tidy numeric frame (written as CSV) and
one display grid per experiment (written as an HTML fragment). Repeats of one grid point are
averaged with a 95% confidence interval (grouping.grid_points); a grid point without an ok run
shows its status.
Which tables the report has, and what each is built from, is declared once in analysis
(REPORT_TABLES).
"""

from analysis.tables.scaling import series_workers  # noqa: F401 (analysis.report.plots labels its series with it)
