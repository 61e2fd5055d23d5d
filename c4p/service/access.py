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
  and is open otherwise (the config allows that on loopback or behind mTLS only). Each
  registration credential names the hosts it may place ranks on (glob patterns, default all):
  a launcher of one cluster partition cannot claim the NICs of another. An admin token may
  register on any host;
* admin calls need an admin token; with mTLS the client certificate may further be required to
  carry one of the configured names.

Failed authentications are rate-limited (``failed_auth_per_s``, ``failed_auth_burst``): failures
with an admin or registration token (chosen by an operator, so guessable) or a malformed one
spend the peer address's allowance, and once it is spent those calls are refused with
RESOURCE_EXHAUSTED *before* the credential is even compared, so guessing tokens costs time;
failures with a well-formed job token (unguessable) spend that token's own allowance, so a
released job's client retrying with its dead token slows itself and nobody else
(:mod:`c4p.service.limits`).

Why rate limits per caller and not global: one misbehaving job (a plugin in a crash loop
re-submitting intents) must not starve the others. The caller is the credential: the job for
job-scoped calls, the registration token for registrations (the peer address only for open
registration, which has no credential), and for operator calls the admin credential used, the
peer address and whether the call reads or changes something: a polling dashboard spends its
own bucket and can never starve an urgent DrainLink from another operator (or from itself). Token
buckets refill at ``requests_per_s`` up to ``burst``; an empty bucket is RESOURCE_EXHAUSTED
(retryable: the client backs off). The number of buckets is bounded (the least recently used
are forgotten, which only ever *refills* a forgotten caller).
"""

from __future__ import annotations

import base64
import fnmatch
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
        register_tokens: Sequence[str | tuple[str, Sequence[str]]] = (),
        admin_names: Sequence[str] = (),
    ) -> None:
        if len(secret) < 16:
            raise ValueError("the token secret must be at least 16 bytes")
        self._secret = secret
        self._state = state
        self._admin = tuple(admin_tokens)
        self._register = tuple(
            (t, ("*",)) if isinstance(t, str) else (t[0], tuple(t[1])) for t in register_tokens
        )
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

    def register(self, metadata: Mapping[str, str | bytes]) -> tuple[str, ...]:
        """The host patterns the call's credential may register ranks on (``*``: any)."""
        if not self._register:
            return ("*",)
        token = bearer(metadata)
        if any(_same(token, t) for t in self._admin):
            return ("*",)
        for secret, hosts in self._register:
            if _same(token, secret):
                return hosts
        raise PermissionDenied("not a registration credential", "authorization")

    def registrant(self, metadata: Mapping[str, str | bytes]) -> str:
        """Which credential registers (a replayed registration answers it alone, see
        :meth:`c4p.controller.intake.Intake.register`): ``token:<fingerprint>`` of the
        registration or admin token used, an HMAC of it under the store's secret (nothing
        stored can be replayed as the token), or "" with open registration (no credential:
        the caller's identity decides, :mod:`c4p.service.peers`)."""
        if not self._register:
            return ""
        token = bearer(metadata)
        mac = hmac.new(self._secret, f"registrant\0{token}".encode(), hashlib.sha256)
        return "token:" + mac.hexdigest()[:32]

    def admin(self, metadata: Mapping[str, str | bytes], peer_names: Sequence[str] = ()) -> int:
        """The number of the admin credential the call carries (callers are told apart by it)."""
        if not self._admin:
            raise PermissionDenied("the admin API is disabled (no admin token configured)")
        token = bearer(metadata)
        found = [k for k, t in enumerate(self._admin) if _same(token, t)]
        if not found:
            raise PermissionDenied("not an admin credential", "authorization")
        if self._admin_names and not self._admin_names.intersection(peer_names):
            raise PermissionDenied("the client certificate is not an admin's", "authorization")
        return found[0]


def host_problems(
    hosts: Sequence[str], allowed: Sequence[str], field: str
) -> list[tuple[str, str]]:
    """The hosts a registration credential may not place ranks on (glob patterns)."""
    if "*" in allowed:
        return []
    return [
        (f"{field}[{k}]", f"this credential may not register ranks on host {host!r}")
        for k, host in enumerate(hosts)
        if not any(fnmatch.fnmatchcase(host, pattern) for pattern in allowed)
    ][:20]


class RateSettings(Frozen):
    requests_per_s: float = Field(
        default=50.0, gt=0, le=1e6, description="Sustained calls per caller."
    )
    burst: int = Field(
        default=200, ge=1, le=10_000_000, description="Calls a caller may make at once."
    )
    max_callers: int = Field(default=100_000, ge=1, description="Buckets kept (LRU).")
    failed_auth_per_s: float = Field(
        default=1.0, gt=0, le=1e6, description="Failed authentications per peer address, sustained."
    )
    failed_auth_burst: int = Field(
        default=20,
        ge=1,
        le=10_000_000,
        description="Failed authentications a peer may make at once.",
    )


class RateLimiter:
    """Token buckets keyed by caller (thread-safe; time injected for tests)."""

    def __init__(self, settings: RateSettings, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.refused = 0

    def check(self, caller: str) -> None:
        """Raise :class:`LimitExceeded` if the caller's bucket is empty (nothing is spent)."""
        s = self.settings
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.get(caller, (float(s.burst), now))
        tokens = min(float(s.burst), tokens + (now - last) * s.requests_per_s)
        if tokens < 1.0:
            wait = (1.0 - tokens) / s.requests_per_s
            raise LimitExceeded(f"too many failed authentications; retry in {wait:.2f} s")

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
