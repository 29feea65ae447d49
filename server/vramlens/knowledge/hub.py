"""A model's `config.json` from the Hugging Face Hub: the one network access vramlens makes.

Only `config.json` is fetched, through `huggingface_hub.hf_hub_download` (imported here, when a lookup actually
happens, never at start-up), into the local hub cache, where `hf_cache.cached_config_path` finds it next time.
It honours what huggingface_hub honours: `HF_ENDPOINT` (a mirror or a local server), `HF_TOKEN` or the token
stored by `huggingface-cli login` (gated and private repositories). It never runs when `HF_HUB_OFFLINE` (or
`TRANSFORMERS_OFFLINE`) is set, nor when the `model_lookup` setting / `--offline` flag turns it off.

Each repository is asked at most once per process: answers, refusals included, are kept in `_ANSWERS` (a
failure to reach the Hub for RETRY_S only)
(huggingface_hub docs, "Download files from the Hub": https://huggingface.co/docs/huggingface_hub/guides/download;
errors: https://huggingface.co/docs/huggingface_hub/package_reference/utilities#huggingface_hub.errors).
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from vramlens.knowledge.hf_cache import default_hub_cache

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
CONNECT_S = 3.0
# huggingface_hub's repo-id rule (utils/_validators.py `REPO_ID_REGEX`): `namespace/name`, word characters,
# `-`, `_` and `.`, no `--` or `..`, at most 96 characters.
_REPO_ID = re.compile(r"^[\w\-.]{1,96}/[\w\-.]{1,96}$")
_TRUE = {"1", "on", "yes", "true"}


@dataclass(frozen=True)
class HubAnswer:
    """What the Hub said about one repository: the cached `config.json`, or why there is none."""

    config: Path | None = None
    problem: str | None = None
    pending: bool = False
    """The lookup is still running (in the language server): the answer comes later."""
    base_model: str | None = None
    """The repository is a PEFT adapter (no config.json, an adapter_config.json): the model it adapts."""
    transient: bool = False
    """The Hub could not be reached: worth asking again later."""


PENDING = HubAnswer(pending=True)
HubLookup = Callable[[str], HubAnswer]

RETRY_S = 300.0          # a failure to reach the Hub is asked again after this long (an answer is kept for good)
_ANSWERS: dict[str, tuple[HubAnswer, float | None]] = {}    # repo id → (answer, when it expires; None: never)
_LOCK = threading.Lock()


def offline_reason() -> str | None:
    """Why the environment forbids Hub access (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE), or None."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return f"{var} is set"
    return None


def is_repo_id(name: str) -> bool:
    """Whether `name` can be a Hub model id (`org/name`), not a path or a catalog alias."""
    name = name.strip()
    return bool(_REPO_ID.match(name)) and ".." not in name and "--" not in name and not name.startswith(".")


def fetch_config(repo_id: str) -> HubAnswer:
    """`config.json` of `repo_id` from the Hub (blocking; at most once per process per repository)."""
    repo_id = repo_id.strip()
    if (why := offline_reason()) is not None:
        return HubAnswer(problem=f"not looked up on the Hugging Face Hub: {why}")
    known = _known(repo_id)
    if known is not None:
        return known
    answer = _download(repo_id)
    with _LOCK:
        _ANSWERS[repo_id] = (answer, time.monotonic() + RETRY_S if answer.transient else None)
    return answer


def _known(repo_id: str) -> HubAnswer | None:
    """The answer kept for `repo_id`; a failure to reach the Hub is kept for RETRY_S only."""
    with _LOCK:
        kept = _ANSWERS.get(repo_id)
    if kept is None:
        return None
    answer, expires = kept
    return answer if expires is None or time.monotonic() < expires else None


def _download(repo_id: str) -> HubAnswer:
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, HfHubHTTPError,
                                            LocalEntryNotFoundError, RepositoryNotFoundError)
        from huggingface_hub.utils import logging as hf_logging
    except ImportError:
        return HubAnswer(problem="not looked up on the Hugging Face Hub: huggingface_hub is not installed")
    hf_logging.set_verbosity_error()       # its retry warnings would go to the CLI's stderr / the server's log
    endpoint = os.environ.get("HF_ENDPOINT") or None     # read now: huggingface_hub reads it once, at import
    if (why := _unreachable(endpoint or "https://huggingface.co")) is not None:
        return HubAnswer(problem=f"the Hugging Face Hub could not be reached ({why})", transient=True)
    try:
        path = hf_hub_download(repo_id, "config.json", cache_dir=default_hub_cache(), endpoint=endpoint,
                               etag_timeout=TIMEOUT_S)
    except LocalEntryNotFoundError as exc:      # the connection failed (after huggingface_hub's retries)
        return HubAnswer(problem=f"the Hugging Face Hub could not be reached ({type(exc).__name__})", transient=True)
    except GatedRepoError:
        return HubAnswer(problem=_access_problem(repo_id, gated=True))
    except RepositoryNotFoundError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            return HubAnswer(problem=_access_problem(repo_id, gated=False))
        return HubAnswer(problem=f"`{repo_id}` is not a model on the Hugging Face Hub")
    except EntryNotFoundError:
        return _adapter(repo_id, endpoint)
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            return HubAnswer(problem=_access_problem(repo_id, gated=status == 403))
        return HubAnswer(problem=f"the Hugging Face Hub answered HTTP {status} for `{repo_id}`")
    except Exception as exc:        # no connection, a timeout, a proxy refusing: say so, never fail the analysis
        log.info("Hub lookup of %s failed: %s", repo_id, exc)
        return HubAnswer(problem=f"the Hugging Face Hub could not be reached ({type(exc).__name__})", transient=True)
    return HubAnswer(config=Path(path))


def _unreachable(endpoint: str) -> str | None:
    """Why a TCP connection to the endpoint cannot be opened (within CONNECT_S), or None. huggingface_hub retries
    a failed connection five times with backoff (about 25 s per file); a machine without a network is told at
    once instead. Skipped behind a proxy (the connection goes through it)."""
    import socket
    from urllib.parse import urlsplit

    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                                       "all_proxy")):
        return None
    url = urlsplit(endpoint)
    if not url.hostname:
        return "no host in HF_ENDPOINT"
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=CONNECT_S):
            return None
    except OSError as exc:
        return f"{url.hostname}:{port}: {exc.strerror or type(exc).__name__}"


def _adapter(repo_id: str, endpoint: str | None) -> HubAnswer:
    """A repository without config.json: a PEFT adapter names its base model in adapter_config.json
    (`base_model_name_or_path`, peft/config.py `PeftConfigMixin`)."""
    from huggingface_hub import hf_hub_download

    missing = HubAnswer(problem=f"`{repo_id}` on the Hugging Face Hub has no config.json")
    try:
        path = hf_hub_download(repo_id, "adapter_config.json", cache_dir=default_hub_cache(), endpoint=endpoint,
                               etag_timeout=TIMEOUT_S)
    except Exception:
        return missing
    base = adapter_base(Path(path))
    return HubAnswer(base_model=base) if base else missing


def adapter_base(path: Path) -> str | None:
    """`base_model_name_or_path` of an adapter_config.json (json only, size-bounded), or None."""
    import json

    from vramlens import file_access

    try:
        data = json.loads(file_access.read_checked(path, 1 << 20))
    except (OSError, ValueError):
        return None
    base = data.get("base_model_name_or_path") if isinstance(data, dict) else None
    return base.strip() if isinstance(base, str) and base.strip() and len(base) < 512 else None


def _access_problem(repo_id: str, gated: bool) -> str:
    """What is missing for a 401/403: a token, or access granted to the token's account."""
    try:
        from huggingface_hub import get_token
        token = get_token()
    except Exception:
        token = None
    kind = "gated" if gated else "private or gated"
    if token is None:
        return (f"`{repo_id}` is {kind} on the Hugging Face Hub: log in with `huggingface-cli login` or set "
                f"HF_TOKEN")
    return (f"`{repo_id}` is {kind} on the Hugging Face Hub and the token in use has no access: request access "
            f"on the model's page, or use a token of an account that has it")


class BackgroundLookups:
    """Hub lookups for the language server: `__call__` answers at once (PENDING while a download runs in a
    worker thread); `on_done` is called, from that thread, when an answer arrives."""

    def __init__(self, on_done: Callable[[str], None]):
        self._on_done = on_done
        self._running: dict[str, Future] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def __call__(self, repo_id: str) -> HubAnswer:
        repo_id = repo_id.strip()
        if offline_reason() is not None:
            return fetch_config(repo_id)           # answers at once, without a thread
        known = _known(repo_id)
        if known is not None:
            return known
        with self._lock:
            if repo_id not in self._running:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="vramlens-hub")
                future = self._executor.submit(fetch_config, repo_id)
                future.add_done_callback(lambda _f, r=repo_id: self._finished(r))
                self._running[repo_id] = future
        return PENDING

    def _finished(self, repo_id: str) -> None:
        with self._lock:
            self._running.pop(repo_id, None)
        try:
            self._on_done(repo_id)
        except Exception:
            log.exception("after the Hub lookup of %s", repo_id)

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


def forget_answers() -> None:
    """Drop the answers kept in this process (tests start each fake Hub afresh)."""
    with _LOCK:
        _ANSWERS.clear()
