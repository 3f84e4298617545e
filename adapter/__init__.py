"""The adapter: everything between gangsat's pure solver and the outside world.

Flow: cluster -> snapshot (``solver.model.ClusterState``) -> solver (pure, in ``solver``)
-> ``Decision`` -> validator (``solver.validate.check``) -> binder. This package holds
the outer steps: today the command line (``adapter.cli``, the ``gangsat`` command) and
the example scenarios it ships (``adapter/scenarios/*.json``). It may import ``solver``;
it must not import ``benchmarks`` (import-linter checks both directions).
"""
