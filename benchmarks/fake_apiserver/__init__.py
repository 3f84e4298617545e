"""A fake Kubernetes API server over real HTTP, for tests and the bind-throughput benchmark.

What it fakes: the REST surface a scheduler touches, served by ``http.server`` with HTTP/1.1
keep-alive, so the official ``kubernetes`` client (ApiClient, urllib3, ``watch.Watch``)
runs its real code paths against it:

- discovery (``/api``, ``/api/v1``, ``/apis``, ``/apis/{group}[/{version}]``, ``/version``);
- nodes, pods (``status``, ``binding`` and ``eviction`` subresources, and
  ``/namespaces/{ns}/bindings``), core and ``events.k8s.io`` events, namespaces, leases,
  priority classes, PodDisruptionBudgets (``matchLabels``; ``minAvailable`` or
  ``maxUnavailable``, integers or percentages; an eviction that would break one is a 429,
  two over one pod a 500, and a Pending, finished or terminating pod is evicted without
  one, as kube-apiserver's eviction check does), and CRDs — a POSTed CustomResourceDefinition
  registers its resource, so CRD manifests can be applied;
- a DELETE or an eviction ends a bound pod gracefully, as a kubelet would: it keeps its
  node with a ``deletionTimestamp`` for its grace period (the request's, the pod's
  ``terminationGracePeriodSeconds``, else 30 s), then is deleted; an unbound pod goes at
  once;
- one global resourceVersion counter; get, list (label and field selectors, ``limit`` and
  ``continue`` paging consistent at the first page's version), watch (initial ADDED
  events, replay from a version, 410 Expired as an ERROR event, bookmarks,
  ``timeoutSeconds``), create (``generateName``), update with optimistic concurrency,
  JSON / merge / strategic-merge patch, delete with preconditions, deletecollection;
- apiserver behaviour a scheduler can trip over: pod create resets ``status`` to Pending
  and runs Priority admission (``spec.priority`` from the PriorityClass, 403 for an unknown
  class or a hand-set mismatching priority) and defaults ``spec.schedulerName``; pod
  updates may not change the spec beyond what a real server allows, so ``spec.nodeName``
  is set only by a binding; updates that change nothing neither bump the version nor
  emit an event; a write to a resource with a status subresource ignores ``status``;
  a watch with selectors sees an object that stops matching as DELETED (carrying its
  previous state) and one that starts matching as ADDED, as the watch cache does, and
  an event is serialised once for all the watches that send it as it is, as the watch
  cache's caching objects do;
- what requests cost the machine, if asked: ``latency_s`` sleeps in every non-watch
  request, and ``cpu_ms_per_request`` (``--cpu-ms``) burns that much CPU in it, outside
  the GIL, so it takes a core from the scheduler as a real apiserver and etcd on the
  same machine would.

What it deliberately does not fake, because nothing in gangsat depends on it: auth
(no TLS, no tokens, no RBAC), schema validation beyond object names, server-side apply
(415), ``dryRun`` but on pods/eviction (400 rather than silently writing), protobuf and
CBOR (always JSON), graceful deletion beyond pods, and finalizers (deleting a namespace
deletes its objects at once), namespace existence checks on create,
``managedFields``, conversion between versions beyond rewriting ``apiVersion``, shared
storage between core and ``events.k8s.io`` events, streaming lists (``sendInitialEvents``), list
``resourceVersion`` semantics (a list is always served at the current version), and
strategic merge patch beyond the merge keys in ``patches.SMP_MERGE_KEYS``. Nor does it
model how a real server's cost varies with the request (a large list or a busy watch
costs more than a get): every non-watch request costs the same, and watch events cost
nothing extra. How that leans: a PodDisruptionBudget's healthy pods are counted on the
spot (bound, Running, Ready unless no condition says: no kubelet posts one) where a real
server reads the status the disruption controller keeps; a binding's resourceVersion
precondition is not checked; bookmarks come every
``bookmark_interval_s`` whether or not the version moved (a real server sends one about a
minute, and only once its version has moved past the watch's: a quiet collection may
get none for minutes; 0 here sends none), so a dropped watch resumes from a fresher
version than it would, and a quiet one is never silent; no kubelet posts pod status, so a real
cluster's 2-4 extra writes and events per bound pod are missing from every throughput
figure. A watch from a version the server never reached is a 504
``ResourceVersionTooLarge`` at once (a real server first waits up to 3 s for it). Watch
history is kept per resource, like the apiserver's watch cache, so a busy resource does
not expire
another's versions.

It lives in ``benchmarks/`` rather than ``tests/`` because the bind-throughput benchmark
runs against it too (in-process, or as ``python -m benchmarks.fake_apiserver`` in a
separate process), not only the test suite.

The package, from the bottom up (a module imports only modules listed before it):
``objects`` (JSON objects, resources, errors), ``selectors``, ``patches``, ``watch``
(events and watchers), ``storage`` (the shared state), ``registry`` (built-ins, CRDs,
discovery), ``admission``, ``writes``, ``reads``, ``faults``, ``api`` (what the handler
serves), ``costs`` (latency, CPU), ``routing`` and ``handler`` (HTTP), ``server``
(``FakeApiServer``), ``cli``.
"""

from benchmarks.fake_apiserver.api import RequestRecord
from benchmarks.fake_apiserver.cli import main
from benchmarks.fake_apiserver.objects import BindingRecord, FakeApiError
from benchmarks.fake_apiserver.server import FakeApiServer

__all__ = ["BindingRecord", "FakeApiError", "FakeApiServer", "RequestRecord", "main"]
