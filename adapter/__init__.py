"""The adapter: everything between gangsat's pure solver and the outside world.

Flow: cluster -> snapshot (``solver.model.ClusterState``) -> solver (pure, in ``solver``)
-> ``Decision`` -> validator (``solver.validate.check``) -> binder -> status, metrics.
This package holds the outer steps: the scheduling loop (``adapter.loop``) over the
``Cluster`` protocol (``adapter.cluster``), its metrics (``adapter.metrics``), the
embedded simulated cluster with its scenarios and traces (``adapter.sim``) and the
``gangsat`` command (``adapter.cli``). It may import ``solver``; it must not import
``benchmarks`` (import-linter checks both directions).
"""
