"""asv benchmarks for kstore (see ``asv_bench/asv.conf.json``).

Data follows shared/bench/WORKLOAD.md at a small size (N = 200_000) so a full ``asv run``
stays quick; ``bench/side_by_side.py`` runs the workload at full size against other systems.
"""
