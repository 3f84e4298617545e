"""The Kubernetes backend: turning API objects into snapshots (``convert``)."""
