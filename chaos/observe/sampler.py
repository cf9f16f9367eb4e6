"""Scrapes every engine's and the router's ``/metrics`` at 10 Hz into the history.

One background thread, one keep-alive httpx client per source, a short timeout per scrape
so a frozen engine costs one missed sample, not a stalled sampler. Parsing is
prometheus_client's. Values are summed over label sets, keyed by the metric name without
its ``sglang:`` prefix (engines) or as-is (router, Toxiproxy); smg's per-worker series are
also kept per worker (``name:url``), its breaker outcomes per worker and outcome
(``smg_worker_cb_outcomes_total:url:failure``) and its breaker transitions per worker and
state entered (``smg_worker_cb_transitions_total:url:open``). A failed scrape records
nothing: missing data stays missing, never zero.

A scenario may also watch services' health probes (``watch_health``) as a checker sees
it: the ``health`` source holds, per service, 1 for a 200, 0 for any other answer; a probe
that got no answer in time leaves its service out of the sample (no answer is not an answer).
A soak also watches processes (``watch_processes``): the ``procs`` source holds each
service's process tree's resident memory (``rss_bytes:<service>``) and open files
(``open_fds:<service>``), once a second, read by psutil; a tree it cannot read is left out.

A real SGLang engine's ``/metrics`` queue gauges move only when decode logs a batch, so an
engine that serves ``/v1/loads`` (the stack's ``<engine>_loads`` endpoint) is read there
too, in the same sample: its live counts (``sglang_disagg_decode_transfer_queue_reqs``)
take the names of the gauges they stand for (``num_decode_transfer_queue_reqs``) and win.
What ``/metrics`` said of the same figure is kept beside them, as ``<name>@metrics``
(``twin``): two sources of one figure are judged against each other
(``chaos.judge.gauges.sources_agree``), so that a lying one cannot hide behind the other.

The router is read the same way where the stack names its worker list (``router_loads``,
smg's ``/workers``): each worker's ``load`` there is the counter smg routes by, and takes the
name of the gauge that reports it (``smg_worker_requests_active``). smg 1.13.0 sets that
gauge from a read of the counter after each change, so two requests ending at once can leave
it at a count the counter has left (docs/known-issues.md): the gauge is kept as the twin.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable, Iterable

import httpx
import psutil
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from chaos.errors import TargetError
from chaos.observe.history import History
from chaos.observe.records import Sample
from chaos.system.limits import waiting
from chaos.system.topology import is_engine

__all__ = [
    "HEALTH",
    "PROCS",
    "PROCS_INTERVAL_S",
    "Sampler",
    "merged",
    "parse_metrics",
    "twin",
    "values_of",
    "worker_loads",
]

DEFAULT_INTERVAL_S = 0.1
_SCRAPE_TIMEOUT = httpx.Timeout(0.5, connect=0.25)
HEALTH = "health"  # the source of /health probes (watch_health)
PROCS = "procs"  # the source of process trees' memory and open files (watch_processes)
PROCS_INTERVAL_S = 1.0  # memory and descriptors move slowly; reading a tree costs a few ms
# smg's health check timeout; SGLang 0.5.23's /health runs a 1-token generate, so takes 1 s at least
_HEALTH_TIMEOUT = httpx.Timeout(5.0, connect=0.25)
# What health checkers (Compose, load balancers, smg itself) and monitors (this sampler's
# read of smg's worker list) ask for: not serving traffic.
PROBE_PATHS = frozenset(
    {
        "/workers",
        "/health",
        "/readiness",
        "/liveness",
        "/health_generate",
        "/metrics",
        "/server_info",
        "/model_info",
        "/get_server_info",
        "/get_model_info",
    }
)
# Older SGLang names the prefill bootstrap queue gauge differently: read both as one.
_ALIASES = {"num_prefill_prealloc_queue_reqs": "num_prefill_bootstrap_queue_reqs"}
_LOADS_PREFIX = "sglang_"  # /v1/loads in Prometheus form: sglang_num_running_reqs, sglang_disagg_*
# What no value comes from, cut by C-speed regexes before prometheus_client's parser sees the
# page: histogram buckets, _created stamps, HELP and TYPE lines (two thirds of an SGLang
# engine's page), and label sets that hold none of the labels values are kept apart by
# (values are summed over the rest). A 10 Hz sample of both engines and smg then costs the
# rig 8 ms of its GIL instead of 39 ms.
_KEPT_APART_BY = ("proxy", "worker", "path")
_UNKEPT_SUFFIXES = ("_bucket", "_created")
_UNKEPT_LINES = re.compile(r"^(?:[^#\n]*(?:%s)[{ ][^\n]*|#[^\n]*)\n" % "|".join(_UNKEPT_SUFFIXES), re.M)
# (a label set starts at the brace after the name: a label's value may hold braces too, as
# smg's path="/workers/{worker_id}")
_SUMMED_LABELS = re.compile(r"^([^\s{#]+)\{(?![^\n]*\b(?:%s)=)[^\n]*\}(?= )" % "|".join(_KEPT_APART_BY), re.M)


def _name(raw: str) -> str:
    """The sampler's key for a metric: SGLang's prefixes gone, /v1/loads' ``disagg_<queue>``
    read as the ``num_<queue>`` gauge of /metrics, older names aliased."""
    if raw.startswith(_LOADS_PREFIX):
        raw = raw.removeprefix(_LOADS_PREFIX)
        raw = "num_" + raw.removeprefix("disagg_") if raw.startswith("disagg_") else raw
    name = raw.removeprefix("sglang:")
    return _ALIASES.get(name, name)


def parse_metrics(text: str) -> dict[str, float]:
    """One sample's values from a Prometheus text page (see the module's docstring).

    The rig must observe what it judges in time: at full cost, parsing on a loaded 2-core
    machine held the GIL long enough to delay the clients' reads by a second and more, and a
    reply that came on time was judged late. Hence what no value comes from is cut first."""
    return values_of(text_string_to_metric_families(_SUMMED_LABELS.sub(r"\1", _UNKEPT_LINES.sub("", text))))


def values_of(families: Iterable[Metric]) -> dict[str, float]:
    """The sampler's values from parsed metric families: what ``parse_metrics`` keeps."""
    values: dict[str, float] = {}
    for fam in families:
        for s in fam.samples:
            if s.name.endswith(_UNKEPT_SUFFIXES):
                continue
            name = _name(s.name)
            values[name] = values.get(name, 0.0) + s.value
            if "proxy" in s.labels:  # Toxiproxy: keep each link and direction apart
                key = f"{name}:{s.labels['proxy']}:{s.labels.get('direction', '')}"
                values[key] = values.get(key, 0.0) + s.value
            elif "worker" in s.labels:  # smg: keep each worker apart too
                key = f"{name}:{s.labels['worker']}"
                values[key] = values.get(key, 0.0) + s.value
                kind = s.labels.get("outcome") or s.labels.get(
                    "to"
                )  # breaker outcomes; transitions by the state entered
                if kind:
                    key = f"{key}:{kind}"
                    values[key] = values.get(key, 0.0) + s.value
            elif "path" in s.labels:  # smg: serving traffic apart from health checks
                key = f"{name}:{'probe' if s.labels['path'] in PROBE_PATHS else 'serving'}"
                values[key] = values.get(key, 0.0) + s.value
    return values


# the gauge smg sets from each worker's load counter, which its /workers lists as "load"
_WORKER_LOAD = "smg_worker_requests_active"


def worker_loads(workers: dict[str, Any]) -> dict[str, float]:
    """One sample's values from smg's ``/workers``: each worker's load counter under the
    name of the gauge that reports it, per worker (``name:url``) and summed, as
    ``values_of`` keys smg's page."""
    values = {f"{_WORKER_LOAD}:{w['url']}": float(w["load"]) for w in workers["workers"]}
    return {_WORKER_LOAD: sum(values.values()), **values}


def twin(name: str) -> str:
    """The key of what an engine's ``/metrics`` said of a figure its ``/v1/loads`` also
    reports (the plain name holds the live count)."""
    return f"{name}@metrics"


def merged(pages: list[dict[str, float]]) -> dict[str, float]:
    """One sample's values from its pages in order (``/metrics``, then ``/v1/loads``): a
    later page's figure wins, and what the first page said of it is kept as its ``twin``."""
    if not pages:
        return {}
    first, values = pages[0], dict(pages[0])
    for page in pages[1:]:
        values |= {twin(name): first[name] for name in page if name in first}
        values |= page
    return values


def metrics_urls(endpoints: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """source -> the URLs of one sample, for a stack's endpoints: each engine's /metrics (and
    /v1/loads where it serves them), the router's (and its worker list, where named), and
    Toxiproxy's if any."""
    urls = {
        engine: (
            endpoints[engine] + "/metrics",
            *([endpoints[f"{engine}_loads"]] if f"{engine}_loads" in endpoints else []),
        )
        for engine in endpoints
        if is_engine(engine)  # every engine of the stack's topology
    }
    urls["router"] = (
        endpoints["router_metrics"],
        *([endpoints["router_loads"]] if "router_loads" in endpoints else []),
    )
    if "toxiproxy_metrics" in endpoints:
        urls["toxiproxy"] = (endpoints["toxiproxy_metrics"],)
    return urls


class Sampler:
    """``start()`` then ``stop()``; ``latest(source)`` serves triggers between samples."""

    def __init__(
        self, history: History, urls: dict[str, tuple[str, ...]], *, interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        self.history = history
        self.urls = urls
        self.interval_s = interval_s
        self._latest: dict[str, Sample] = {}
        self.failures: dict[str, list[float]] = {name: [] for name in urls}  # times of failed scrapes
        self._stop = threading.Event()
        self._new = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._clients = {name: httpx.Client(timeout=_SCRAPE_TIMEOUT) for name in urls}
        self._health_urls: dict[str, str] = {}
        self._pid_of: dict[str, Callable[[], int | None]] = {}

    def start(self) -> "Sampler":
        """One thread per source, so that a frozen engine (every scrape a timeout) never
        slows the sampling of the others."""
        for name in self.urls:
            self._spawn(name, self._scrape)
        return self

    def watch_health(self, urls: dict[str, str]) -> None:
        """Probe each service's health endpoint (service -> its URL) from now on, into the
        ``health`` source. Opt-in: the engines log every probe."""
        if HEALTH in self.failures:
            raise ValueError("health is already watched")
        self._health_urls = dict(urls)
        # a fresh connection each probe: a checker's kept-alive socket could outlive the process it asks
        self._clients[HEALTH] = httpx.Client(timeout=_HEALTH_TIMEOUT, limits=httpx.Limits(max_keepalive_connections=0))
        self.failures[HEALTH] = []
        self._spawn(HEALTH, self._probe_health)

    def watch_processes(self, pid_of: dict[str, Callable[[], int | None]]) -> None:
        """Read each service's process tree from now on, into the ``procs`` source;
        ``pid_of`` gives a service's main process (asked every time: a restart changes it)."""
        if PROCS in self.failures:
            raise ValueError("processes are already watched")
        self._pid_of = dict(pid_of)
        self.failures[PROCS] = []
        self._spawn(PROCS, self._read_processes, PROCS_INTERVAL_S)

    def _spawn(self, name: str, read: Callable[[str], None], interval_s: float | None = None) -> None:
        t = threading.Thread(
            target=self._run,
            args=(name, read, interval_s or self.interval_s),
            name=f"pdchaos-sampler-{name}",
            daemon=True,
        )
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        for c in self._clients.values():
            c.close()

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _scrape(self, name: str) -> None:
        t = self.history.now()
        pages: list[dict[str, float]] = []
        try:
            for url in self.urls[name]:  # all of them, or no sample: a half sample would mix stale and live
                r = self._clients[name].get(url)
                r.raise_for_status()
                json_page = r.headers.get("content-type", "").startswith("application/json")
                pages.append(worker_loads(r.json()) if json_page else parse_metrics(r.text))
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            self.failures[name].append(t)
            return
        self._add(Sample(t, name, merged(pages)))

    def _probe_health(self, name: str) -> None:
        t = self.history.now()
        values: dict[str, float] = {}
        for service, url in self._health_urls.items():
            try:
                values[service] = 1.0 if self._clients[name].get(url).status_code == 200 else 0.0
            except httpx.HTTPError:
                self.failures[name].append(t)
        self._add(Sample(t, name, values))

    def _read_processes(self, name: str) -> None:
        t = self.history.now()
        values: dict[str, float] = {}
        for service, pid_of in self._pid_of.items():
            try:
                pid = pid_of()
                if pid is None:
                    continue
                root = psutil.Process(pid)
                tree = [root, *root.children(recursive=True)]
                values[f"rss_bytes:{service}"] = float(sum(p.memory_info().rss for p in tree))
                values[f"open_fds:{service}"] = float(sum(p.num_fds() for p in tree))
                values[f"pid:{service}"] = float(pid)  # a new one is a restart (``stayed_up``)
            except (psutil.Error, TargetError):  # gone between two reads, or not ours to read
                self.failures[name].append(t)
        self._add(Sample(t, name, values))

    def _add(self, sample: Sample) -> None:
        self.history.append(sample)
        with self._new:
            self._latest[sample.source] = sample
            self._new.notify_all()

    def _run(self, name: str, read: Callable[[str], None], interval_s: float) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            read(name)
            next_at = max(next_at + interval_s, time.monotonic())  # a slow scrape skips, never bursts
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def latest(self, source: str) -> Sample | None:
        with self._new:
            return self._latest.get(source)

    def wait_for_sample(self, timeout_s: float) -> None:
        """Block until any new sample arrives or ``timeout_s`` passes."""
        with self._new:
            self._new.wait(timeout_s)

    def wait_quiet(self, gauges: Iterable[tuple[str, str]], *, within_s: float) -> bool:
        """Keep sampling until every gauge reads 0 (or ``within_s`` passes): lets a scenario
        end only once its verdicts' windows are covered. A gauge a sample lacks is not quiet:
        missing is unknown, never 0. Never raises; verdicts judge."""

        called, gauges = self.history.now(), list(gauges)
        what = "quiet: " + ", ".join(f"{s}:{m}" for s, m in gauges)
        return self.poll(lambda: self.is_quiet(gauges, since=called), timeout_s=within_s, what=what)

    def is_quiet(self, gauges: Iterable[tuple[str, str]], *, since: float) -> bool:
        """Whether every gauge reads 0 in its source's latest sample, taken at history time
        ``since`` or later. A gauge the sample lacks is not quiet: missing is unknown."""
        for source, metric in gauges:
            s = self.latest(source)
            if s is None or s.t < since or metric not in s.values or s.values[metric] > 0:
                return False
        return True

    def poll(
        self, predicate: Callable[[], bool], *, timeout_s: float, what: str = "a condition on the samples"
    ) -> bool:
        """Re-check ``predicate`` at every new sample until it holds or the deadline passes."""
        deadline = time.monotonic() + timeout_s
        with waiting(what, timeout_s):
            while True:
                if predicate():
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.wait_for_sample(min(remaining, self.interval_s * 2))
