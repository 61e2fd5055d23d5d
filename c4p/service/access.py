"""Who may call what, and how often: job tokens, the registration and admin credentials, and
per-caller rate limits.

Why tokens derived with HMAC rather than stored: a job token is
``HMAC-SHA256(store secret, job id, incarnation)``. Nothing secret is stored per job, a restart
(or a second replica sharing the store) recognizes every token without a lookup table, a retry
of a registration whose answer was lost gets the same token back, and a job id registered again
(new incarnation) invalidates every token of the earlier job. Comparison is constant-time.

Every credential travels as gRPC metadata ``authorization: Bearer <token>``, which TLS protects
on the wire. The rules:

* job-scoped calls (SubmitIntents, WatchBindings, ReleaseJob) need *that* job's token: a valid
  token of another job is PERMISSION_DENIED, exactly like a job that does not exist, so a token
  cannot even learn which other jobs exist;
* RegisterJob needs a registration token when the config names any (the launcher's credential),
  and is open otherwise (development on loopback);
* admin calls need an admin token; with mTLS the client certificate may further be required to
  carry one of the configured names.

Why rate limits per caller and not global: one misbehaving job (a plugin in a crash loop
re-submitting intents) must not starve the others. The caller is the job for job-scoped calls,
the peer address for registrations and "admin" for operator calls. Token buckets refill at
``requests_per_s`` up to ``burst``; an empty bucket is RESOURCE_EXHAUSTED (retryable: the client
backs off). The number of buckets is bounded (the least recently used are forgotten, which only
ever *refills* a forgotten caller).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

from pydantic import Field

from c4p.controller.errors import LimitExceeded, PermissionDenied, Unauthenticated
from c4p.controller.state import ControllerState
from topology.base import Frozen

TOKEN_PREFIX = "c4pj1."


def bearer(metadata: Mapping[str, str | bytes]) -> str:
    """The bearer token of a call's metadata; UNAUTHENTICATED if there is none."""
    value = metadata.get("authorization")
    if value is None:
        raise Unauthenticated("missing metadata 'authorization: Bearer <token>'", "authorization")
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    scheme, _, token = text.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("expected 'Bearer <token>'", "authorization")
    return token.strip()


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))


class Guard:
    """Checks credentials against the store's secret and the configured tokens."""

    def __init__(
        self,
        secret: bytes,
        state: ControllerState,
        *,
        admin_tokens: Sequence[str],
        register_tokens: Sequence[str] = (),
        admin_names: Sequence[str] = (),
    ) -> None:
        if len(secret) < 16:
            raise ValueError("the token secret must be at least 16 bytes")
        self._secret = secret
        self._state = state
        self._admin = tuple(admin_tokens)
        self._register = tuple(register_tokens)
        self._admin_names = frozenset(admin_names)

    def token_for(self, job_id: str, incarnation: int) -> str:
        mac = hmac.new(self._secret, f"job\0{job_id}\0{incarnation}".encode(), hashlib.sha256)
        return TOKEN_PREFIX + base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def job(self, metadata: Mapping[str, str | bytes], job_id: str) -> int:
        """The incarnation of ``job_id`` if the call carries its token."""
        token = bearer(metadata)
        if not token.startswith(TOKEN_PREFIX):
            raise Unauthenticated("not a c4p job token", "authorization")
        with self._state.lock:
            entry = self._state.jobs.get(job_id)
            incarnation = entry.record.incarnation if entry is not None else 0
        if entry is None or not _same(token, self.token_for(job_id, incarnation)):
            raise PermissionDenied(f"the token does not open job {job_id!r}", "job_id")
        return incarnation

    def register(self, metadata: Mapping[str, str | bytes]) -> None:
        if not self._register:
            return
        token = bearer(metadata)
        if not any(_same(token, t) for t in self._register + self._admin):
            raise PermissionDenied("not a registration credential", "authorization")

    def admin(self, metadata: Mapping[str, str | bytes], peer_names: Sequence[str] = ()) -> None:
        if not self._admin:
            raise PermissionDenied("the admin API is disabled (no admin token configured)")
        token = bearer(metadata)
        if not any(_same(token, t) for t in self._admin):
            raise PermissionDenied("not an admin credential", "authorization")
        if self._admin_names and not self._admin_names.intersection(peer_names):
            raise PermissionDenied("the client certificate is not an admin's", "authorization")


class RateSettings(Frozen):
    requests_per_s: float = Field(default=50.0, gt=0, description="Sustained calls per caller.")
    burst: int = Field(default=200, ge=1, description="Calls a caller may make at once.")
    max_callers: int = Field(default=100_000, ge=1, description="Buckets kept (LRU).")


class RateLimiter:
    """Token buckets keyed by caller (thread-safe; time injected for tests)."""

    def __init__(self, settings: RateSettings, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.refused = 0

    def take(self, caller: str, cost: float = 1.0) -> None:
        """Spend ``cost`` from the caller's bucket, or raise :class:`LimitExceeded`."""
        s = self.settings
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.pop(caller, (float(s.burst), now))
            tokens = min(float(s.burst), tokens + (now - last) * s.requests_per_s)
            if tokens < cost:
                self._buckets[caller] = (tokens, now)
                self.refused += 1
                wait = (cost - tokens) / s.requests_per_s
                raise LimitExceeded(
                    f"rate limit: {s.requests_per_s:g} calls/s (burst {s.burst}) for {caller}; "
                    f"retry in {wait:.2f} s"
                )
            self._buckets[caller] = (tokens - cost, now)
            while len(self._buckets) > s.max_callers:
                self._buckets.popitem(last=False)
