"""A model's `config.json` from the Hugging Face Hub: the one network access vramlens makes.

One GET of `{endpoint}/{org}/{name}/resolve/main/config.json` (`HF_ENDPOINT`, else https://huggingface.co), and
for a repository without one (a PEFT adapter) one of `adapter_config.json`; nothing else is requested. The file
lands in the local hub cache (`<cache>/models--org--name/snapshots/<commit>/config.json` and `refs/main`, the
layout `hf_cache.cached_config_path` and huggingface_hub read), written only once it is complete. Gated and
private repositories use `HF_TOKEN` or the token `huggingface-cli login` stored. Nothing is asked when
`HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) is set, nor when the `model_lookup` setting / `--offline` turns it off.

The request is made here with the standard library (urllib), not with `huggingface_hub.hf_hub_download`, which
cannot be bounded (huggingface_hub 2.4.0):
- no size limit: `file_download.http_get` streams whatever the server sends into the cache (a 300 MB
  "config.json" was stored whole);
- no total deadline: `etag_timeout` and `HF_HUB_DOWNLOAD_TIMEOUT` are per-read timeouts, so a server sending one
  byte a second is never timed out;
- other requests and writes: building its User-Agent (`utils/_headers.py` → `utils/_detect_agent.py`) fetches
  `{ENDPOINT}/api/agent-harnesses` and writes `HF_HOME/.agent_harnesses.json`; its `get_token`
  (`utils/_auth.py`) may exchange an OIDC token or refresh an OAuth token over the network and save it.
Here (`hub_http`) every lookup has one deadline (DEADLINE_S, from the first connection to the last byte of both
files): every socket it opens is shut down when it passes, which ends a read blocked on a trickle. A body is read
up to MAX_CONFIG_BYTES. The status and `X-Error-Code` answers are read as huggingface_hub reads them
(`utils/_http.py` `hf_raise_for_status`; https://huggingface.co/docs/huggingface_hub/package_reference/utilities).

Each repository is asked at most once per process: answers, refusals included, are kept in `_ANSWERS` (a
failure to reach the Hub for RETRY_S only).
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from vramlens.knowledge.hf_cache import default_hub_cache

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
FILES = ("config.json", "adapter_config.json")
# A transformers config.json is 1–5 KB; the largest are classifiers listing every label twice (`id2label` and
# `label2id`, written with indent=2 by PretrainedConfig.to_json_string): ImageNet-21k's 21,843 classes with
# 25-character names make 1.8 MB. 4 MiB holds that with room to spare, and is the bound on a local config.json
# too (models.read_config_file).
MAX_CONFIG_BYTES = 4 * 1024 * 1024
# The whole lookup: a few KB take well under a second; 20 s leaves room for a slow link, TLS, a redirect and the
# adapter's second file, and is how long `vramlens check` can wait per unknown model.
DEADLINE_S = 20.0
# huggingface_hub's repo-id rule (utils/_validators.py `REPO_ID_REGEX`): `namespace/name`, word characters,
# `-`, `_` and `.`, no `--` or `..`, at most 96 characters.
_REPO_ID = re.compile(r"^[\w\-.]{1,96}/[\w\-.]{1,96}$")
_COMMIT = re.compile(r"[0-9a-f]{40}")  # `X-Repo-Commit` (constants.HUGGINGFACE_HEADER_X_REPO_COMMIT): a git sha
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

RETRY_S = 300.0  # a failure to reach the Hub is asked again after this long (an answer is kept for good)
_ANSWERS: dict[str, tuple[HubAnswer, float | None]] = {}  # repo id → (answer, when it expires; None: never)
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
    """`config.json` of `repo_id` from the Hub (blocking, at most DEADLINE_S; at most once per process per
    repository)."""
    repo_id = repo_id.strip()
    if (why := offline_reason()) is not None:
        return HubAnswer(problem=f"not looked up on the Hugging Face Hub: {why}")
    known = _known(repo_id)
    if known is not None:
        return known
    if not is_repo_id(repo_id):
        return HubAnswer(problem=f"`{repo_id}` is not a Hugging Face Hub model id")
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


class _NoFile(Exception):
    """A lookup that ends without a file: `answer` says why."""

    def __init__(self, answer: HubAnswer):
        super().__init__(answer.problem)
        self.answer = answer


def _download(repo_id: str) -> HubAnswer:
    import http.client

    from vramlens.knowledge import hub_http

    endpoint = (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    deadline = hub_http.Deadline(DEADLINE_S)
    try:
        reply = _get(endpoint, repo_id, "config.json", deadline)
        if reply.status == 200:
            return HubAnswer(config=_store(repo_id, "config.json", reply, endpoint))
        if reply.headers.get("X-Error-Code") == "EntryNotFound":
            return _adapter(repo_id, endpoint, deadline)
        return _refusal(repo_id, reply.status, reply.headers.get("X-Error-Code"))
    except _NoFile as exc:
        return exc.answer
    except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError and socket errors are OSErrors
        if deadline.expired:
            return HubAnswer(
                problem=f"the Hugging Face Hub did not send `{repo_id}`'s config.json within {DEADLINE_S:g} s",
                transient=True,
            )
        log.info("Hub lookup of %s failed: %s", repo_id, exc)
        return HubAnswer(problem=f"the Hugging Face Hub could not be reached ({_why(exc)})", transient=True)
    finally:
        deadline.close()


def _adapter(repo_id: str, endpoint: str, deadline) -> HubAnswer:
    """A repository without config.json: a PEFT adapter names its base model in adapter_config.json
    (`base_model_name_or_path`, peft/config.py `PeftConfigMixin`)."""
    missing = HubAnswer(problem=f"`{repo_id}` on the Hugging Face Hub has no config.json")
    reply = _get(endpoint, repo_id, "adapter_config.json", deadline)
    if reply.status != 200:
        return missing
    path = _store(repo_id, "adapter_config.json", reply, endpoint)
    base = adapter_base(path, [path.parent.resolve()])
    return HubAnswer(base_model=base) if base else missing


def _refusal(repo_id: str, status: int, code: str | None) -> HubAnswer:
    """The answer for an HTTP error, read as huggingface_hub's `hf_raise_for_status` reads it: `X-Error-Code`
    GatedRepo, RepoNotFound, or a bare 401 (the Hub's answer for a private repository without a token)."""
    if code == "GatedRepo":
        return HubAnswer(problem=_access_problem(repo_id, gated=True))
    if code == "RepoNotFound" or status == 401:
        if status in (401, 403):
            return HubAnswer(problem=_access_problem(repo_id, gated=False))
        return HubAnswer(problem=f"`{repo_id}` is not a model on the Hugging Face Hub")
    if status == 403:
        return HubAnswer(problem=_access_problem(repo_id, gated=True))
    return HubAnswer(
        problem=f"the Hugging Face Hub answered HTTP {status} for `{repo_id}`", transient=status == 429 or status >= 500
    )


def _why(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)  # urllib.error.URLError wraps the socket error
    inner = reason if isinstance(reason, BaseException) else exc
    return getattr(inner, "strerror", None) or str(inner) or type(inner).__name__


def _get(endpoint: str, repo_id: str, filename: str, deadline):
    """`hub_http.get` of `filename` at the `main` revision (the URL of huggingface_hub's
    constants.HUGGINGFACE_CO_URL_TEMPLATE), with the headers the answer is read by. Raises _NoFile for a body over
    MAX_CONFIG_BYTES."""
    import urllib.parse

    from vramlens import __version__
    from vramlens.knowledge import hub_http

    url = f"{endpoint}/{urllib.parse.quote(repo_id, safe='/')}/resolve/main/{filename}"
    try:
        return hub_http.get(
            url, _token(), f"vramlens/{__version__}", deadline, MAX_CONFIG_BYTES, want=("X-Error-Code", "X-Repo-Commit")
        )
    except hub_http.TooLarge:
        raise _NoFile(
            HubAnswer(
                problem=f"`{repo_id}`'s {filename} on the Hugging Face Hub is larger than "
                f"{MAX_CONFIG_BYTES // (1024 * 1024)} MiB, which no model config is; "
                f"it was not downloaded"
            )
        ) from None


def _store(repo_id: str, filename: str, reply, endpoint: str) -> Path:
    """Write a downloaded file into the hub cache as huggingface_hub lays it out (a regular file in the snapshot,
    as huggingface_hub stores it where symlinks are unavailable, file_download.py `_create_symlink`), whole or not
    at all. Raises _NoFile."""
    commit = reply.headers.get("X-Repo-Commit", "")
    if not _COMMIT.fullmatch(commit):  # huggingface_hub refuses such an answer too (FileMetadataError)
        raise _NoFile(
            HubAnswer(
                problem=f"{endpoint} answered for `{repo_id}`'s {filename} without a commit "
                f"(X-Repo-Commit): it does not look like a Hugging Face Hub"
            )
        )
    repo = default_hub_cache() / ("models--" + repo_id.replace("/", "--"))
    target = repo / "snapshots" / commit / filename
    try:
        _write_whole(target, reply.body)
        _write_whole(repo / "refs" / "main", commit.encode())
    except OSError as exc:
        raise _NoFile(
            HubAnswer(
                problem=f"`{repo_id}`'s {filename} could not be written to the Hugging Face "
                f"cache ({exc.strerror or exc})",
                transient=True,
            )
        ) from None
    return target


def _write_whole(path: Path, data: bytes) -> None:
    """`path` replaced by `data` in one rename: a reader sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".incomplete")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _token() -> str | None:
    """The Hub token huggingface_hub would send (utils/_auth.py `get_token`, without its network-backed sources):
    `HF_TOKEN` (or the older `HUGGING_FACE_HUB_TOKEN`), else the file `huggingface-cli login` wrote
    (`HF_TOKEN_PATH`, else `HF_HOME/token`); none when `HF_HUB_DISABLE_IMPLICIT_TOKEN` is set."""
    env = os.environ
    if env.get("HF_HUB_DISABLE_IMPLICIT_TOKEN", "").strip().lower() in _TRUE:
        return None
    token = env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN")
    if not token:
        home = env.get("HF_HOME") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
        )
        path = os.path.expanduser(env.get("HF_TOKEN_PATH") or os.path.join(home, "token"))
        try:
            from vramlens import file_access

            token = file_access.read_text_checked(Path(path), 4096)
        except OSError:
            return None
    token = token.replace("\r", "").replace("\n", "").strip()
    return token or None


def adapter_base(path: Path, roots: list[Path] | None = None) -> str | None:
    """`base_model_name_or_path` of an adapter_config.json (json only, size-bounded; when `roots` are given, only
    if the file opened lies in them — `file_access.read_checked`), or None."""
    import json

    from vramlens import file_access

    try:
        data = json.loads(file_access.read_checked(path, MAX_CONFIG_BYTES, roots=roots))
    except (OSError, ValueError, RecursionError):
        return None
    base = data.get("base_model_name_or_path") if isinstance(data, dict) else None
    return base.strip() if isinstance(base, str) and base.strip() and len(base) < 512 else None


def _access_problem(repo_id: str, gated: bool) -> str:
    """What is missing for a 401/403: a token, or access granted to the token's account."""
    token = _token()
    kind = "gated" if gated else "private or gated"
    if token is None:
        return f"`{repo_id}` is {kind} on the Hugging Face Hub: log in with `huggingface-cli login` or set HF_TOKEN"
    return (
        f"`{repo_id}` is {kind} on the Hugging Face Hub and the token in use has no access: request access "
        f"on the model's page, or use a token of an account that has it"
    )


class BackgroundLookups:
    """Hub lookups for the language server: `__call__` answers at once (PENDING while a download runs in a
    worker thread); `on_done` is called, from that thread, when an answer arrives."""

    def __init__(self, on_done: Callable[[str], object]):
        self._on_done = on_done
        self._running: dict[str, Future] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def __call__(self, repo_id: str) -> HubAnswer:
        repo_id = repo_id.strip()
        if offline_reason() is not None:
            return fetch_config(repo_id)  # answers at once, without a thread
        known = _known(repo_id)
        if known is not None:
            return known
        with self._lock:
            if repo_id not in self._running:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="vramlens-hub")
                future = self._executor.submit(fetch_config, repo_id)
                future.add_done_callback(lambda _f: self._finished(repo_id))
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
