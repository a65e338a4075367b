"""Studies: exact analyses over grids of cells, run on any backend, resumable, and saved as tidy tables.

- ``grid``: the axes of a sweep (``SweepGrid``), its cells and their keys (``cell_key``), seeds (``parse_seeds``);
- ``cells``: one cell's problem (``build_problem``), its cost before it runs (``check_cell_costs``) and its row
  (``run_cell``);
- ``executor``: the one executor of builds of many cells (``execute``: serial, local processes, Dask, Ray) and
  the one loop that saves their rows as they arrive (``save_as_they_arrive``), which sweeps, the selector's
  datasets (``verispec.selector.dataset``) and through them the report (``verispec.report``) use;
- ``workers``: how many processes a build starts here, and how they end with it (SIGTERM, Ctrl-C, SIGKILL);
- ``clusters``: a Dask scheduler or Ray, refused on one line where the address answers nothing;
- ``tables``: a sweep's table (CSV or Parquet) and row store, and the checks that keep them from destroying data;
- ``sweep``: ``run_sweep``, a grid run through the executor into its table and store.

Importing a module here imports no engine: the simulator, the verifiers and the LP load when a cell runs.
"""
