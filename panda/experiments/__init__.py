"""Experiment sweeps: networks x K x repetitions x presets x budgets x methods, resumable and parallel.

A sweep is described by an :class:`ExperimentSpec` (from a TOML file or the command line) and run
by :func:`run_experiment` into an output folder:

``rows.csv``
    Tidy results, one row per (network, K, preset, epsilon, delta, method, repetition); each row is
    appended (and flushed) the moment it is finished, so an interrupted sweep keeps its work and a
    rerun into the same folder resumes (rows already present are skipped, not recomputed).
``experiment.json``
    The full specification, its hash, the seeds of every instance, package versions, the machine
    and the history of runs into the folder.
``tables.md``
    Markdown tables shaped like the paper's Tables 2 and 4: rows = methods, columns = K, cells
    ``mean ± 1.96 std`` over the repetitions.
``figures/``
    Plotly figures (HTML; PNG too when kaleido is installed). Optional: plotly is imported only here.

The unit of work is one instance, i.e. one (network, K, repetition): :func:`panda.make_instance`
is called once per unit, with a seed derived from the base seed, the network's name, K and the
repetition (:func:`unit_seeds`), and every method, preset and budget of the unit runs on that same
instance (same X, Y, users, tasks and prior) with the same mechanism seed. Methods that do not read a
:class:`panda.PandaConfig` (the baselines) run once per epsilon and have an empty ``preset`` and
``delta``.

Units run on local processes (``concurrent.futures.ProcessPoolExecutor``, the default), in this
process (``"serial"``), or on Dask through the project's execution layer :mod:`panda.execution`:
``"dask"`` is its process-wide executor (a local Dask cluster, or the scheduler named by
``PANDA_DASK_SCHEDULER``), a scheduler address (``"tcp://host:port"`` or ``"dask://host:port"``) is
``get_executor(address)``. There each unit is one low-priority job (:data:`panda.execution.LOW`, on
the workers that take long jobs), its rows stream back as they are finished, and a unit that runs past
its allowance (the sum of its methods' limits and grace times) is stopped and its worker restarted; the
unit is recorded as failed and its finished rows are kept. Inside a unit each method runs in a child
process (``isolate=True``) so that its time limit is a hard wall-clock limit: a method that reaches it
is stopped and recorded as ``"unsolved: time limit ..."`` with the time spent; a child that dies (for
example killed for lack of memory) is recorded as failed. Where a child process cannot be started
(Dask workers are daemonic processes) the method runs in the unit's process and only the LP solvers'
own time limits apply (``limit_enforced`` is then ``False`` in its row).

The package, one job per module:

:mod:`~panda.experiments.spec`
    What a sweep runs: :class:`ExperimentSpec` (validation, TOML spelling), :func:`load_spec`,
    :class:`WorkUnit`, :class:`Job`, :func:`unit_seeds`.
:mod:`~panda.experiments.measure`
    One method on one instance: :func:`measure_method` (the metrics of a row) and the child process
    that enforces its time limit.
:mod:`~panda.experiments.runner`
    One unit (:func:`run_unit`), the executors (serial, local process pool, Dask) and the resuming
    driver :func:`run_experiment` (``experiment.json``, :class:`SweepOutcome`).
:mod:`~panda.experiments.progress`
    Progress lines with an estimate of the time left.
:mod:`~panda.experiments.results`
    ``rows.csv``: :data:`ROW_COLUMNS`, :data:`ROW_KEY`, :func:`row_key`, writing, :func:`read_rows`;
    aggregation over repetitions (:func:`summarise`, :class:`Cell`).
:mod:`~panda.experiments.tables`
    Markdown tables (:func:`markdown_table`, :func:`markdown_tables`, :func:`write_tables`,
    :data:`TABLES`, :data:`METHOD_LABELS`).
:mod:`~panda.experiments.figures`
    Plotly figures (:func:`write_figures`).

Everything public is importable from ``panda.experiments`` itself.
"""

from panda.experiments.figures import write_figures
from panda.experiments.measure import measure_method
from panda.experiments.results import ROW_COLUMNS, ROW_KEY, Cell, read_rows, row_key, summarise
from panda.experiments.runner import SweepOutcome, run_experiment, run_unit
from panda.experiments.spec import DEFAULT_TIME_LIMIT_S, ExperimentSpec, Job, WorkUnit, load_spec, unit_seeds
from panda.experiments.tables import METHOD_LABELS, TABLES, markdown_table, markdown_tables, write_tables

# isort: split
# Private names that other code reaches through the package (tests/panda/test_experiments.py); not part of the API.
from panda.experiments.progress import _Progress as _Progress
from panda.experiments.results import _format_cell as _format_cell
from panda.experiments.runner import _dask_address as _dask_address

__all__ = [
    "ExperimentSpec",
    "Job",
    "WorkUnit",
    "SweepOutcome",
    "ROW_KEY",
    "ROW_COLUMNS",
    "DEFAULT_TIME_LIMIT_S",
    "unit_seeds",
    "load_spec",
    "run_experiment",
    "run_unit",
    "measure_method",
    "read_rows",
    "row_key",
    "summarise",
    "markdown_table",
    "markdown_tables",
    "write_tables",
    "write_figures",
    "METHOD_LABELS",
    "TABLES",
    "Cell",
]
