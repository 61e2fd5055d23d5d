"""Which bucket a call spends: rate limits follow the credential, not the address.

Why: every rank of a host, every job on it and its operator's shell share one address
(127.0.0.1 on a single node). A bucket per address let one misbehaving client lock out its
whole host: a released job's plugin retrying 10/s with its dead token spent the address's
allowance of failed authentications, and the other jobs' SubmitIntents and WatchBindings, the
operator's DrainLink and new registrations all got RESOURCE_EXHAUSTED (issue 33). So:

* a call with a credential spends that credential's bucket: the job's for job-scoped calls,
  the admin credential's (per peer and reads apart from changes) for operator calls, the
  registration token's for RegisterJob; only calls without one (open registration) share
  their peer's;
* a *failed* authentication with a well-formed job token spends a bucket of that token alone:
  job tokens are 256-bit HMACs that nobody guesses, so their failures are a stale client, not
  an attack, and slowing that client must not slow its neighbours;
* failures with anything else (an admin or registration token, which an operator chose and
  someone might guess; a malformed token) still spend the peer's allowance, which is checked
  before the credential is compared, so guessing costs time. They are the only calls that can
  lock an address out, and only for the admin and registration calls that fail there: a job's
  own token is never refused for its neighbours' failures.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from c4p.service.access import TOKEN_PREFIX


def _bearer(metadata: Mapping[str, str | bytes]) -> str:
    value = metadata.get("authorization")
    if value is None:
        return ""
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    scheme, _, token = text.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def failure_bucket(job_scoped: bool, metadata: Mapping[str, str | bytes], host: str) -> str:
    """Where a failed authentication of this call is counted (and checked before the next)."""
    token = _bearer(metadata) if job_scoped else ""
    if token.startswith(TOKEN_PREFIX):
        return "token:" + hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()[:32]
    return f"auth:{host}"


def register_bucket(credential: str, host: str) -> str:
    """The rate bucket of a RegisterJob: its registration token's, else (open registration,
    no credential) its peer's."""
    return f"register:{credential}" if credential.startswith("token:") else f"peer:{host}"
