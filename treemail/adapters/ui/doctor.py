"""``treemail doctor``: is this data directory ready to run agents? One line a check.

Each check prints ``ok``, ``warn`` or ``fail``, what it found, and for a warn or a fail a
hint that says what to do; any fail makes the exit status 1. With ``--json`` each line is a
JSON object (``check``, ``status``, ``detail``, ``hint``).

* ``data dir``: the directory and everything treemail keeps in it are private to this user
  (no group or other bits, owned by this uid);
* ``config``: ``config.toml`` decodes (the daemon refuses to start otherwise);
* ``store``: it opens read-only and verifies (every checksum and index). A read-only open
  takes no lock, so it runs beside the daemon that owns the store and takes nothing from it;
* ``daemon``: it answers on its socket (or ``--connect`` address) and speaks this client's
  protocol version;
* ``model``: for ``model = "openai"``, the endpoint answers a cheap ``GET BASE_URL/models``
  with the configured key within ``--timeout`` seconds: no chat request, nothing billed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import attrs

from treemail.adapters.ui.commands import (
    Sub,
    TokenMissing,
    address_options,
    json_line,
    json_option,
    seconds,
    store_option,
    target,
)
from treemail.adapters.ui.terminal import visible

__all__ = ["Finding", "register"]

Status = Literal["ok", "warn", "fail"]
_OTHERS = 0o077  # group and other bits: what would let another local user in
# What treemail keeps in a data directory, checked for privacy (the daemon's own files).
_KEPT = ("store", "agents", "registered-agents", "config.toml", "daemon.token", "daemon.log")
DEFAULT_TIMEOUT = 5.0


@attrs.frozen
class Finding:
    check: str
    status: Status
    detail: str
    hint: str | None = None

    def line(self) -> str:
        hint = f"; {self.hint}" if self.hint else ""
        return visible(f"{self.status:<5}{self.check:<10}{self.detail}{hint}")


def register(commands: Sub) -> None:
    doctor = commands.add_parser(
        "doctor", help="check the data dir, config, store, daemon and model endpoint")
    address_options(doctor)
    store_option(doctor, "the store to check (default: DATA_DIR/store)")
    doctor.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="how long the daemon and the model endpoint may take to answer "
                             f"(default: {DEFAULT_TIMEOUT:g})")
    json_option(doctor)
    doctor.set_defaults(run=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    failed = False
    for finding in diagnose(args):
        failed = failed or finding.status == "fail"
        if args.json:
            json_line(attrs.asdict(finding))
        else:
            print(finding.line(), flush=True)
    return 1 if failed else 0


def diagnose(args: argparse.Namespace) -> Iterator[Finding]:
    data_dir: Path = args.data_dir
    yield _data_dir(data_dir)
    settings, config = _config(data_dir)
    yield config
    yield _store(args.store or f"lmdb:{data_dir / 'store'}", given=args.store is not None)
    yield asyncio.run(_daemon(args))
    if settings is not None:
        yield _model(settings, args.timeout)


def _data_dir(data_dir: Path) -> Finding:
    if not data_dir.is_dir():
        return Finding("data dir", "fail", f"{data_dir} does not exist",
                       f"run `treemail init --data-dir {data_dir}`, or give --data-dir")
    uid = os.getuid()
    open_to_others: list[str] = []
    for path in _kept_paths(data_dir):
        info = os.lstat(path)
        if info.st_uid != uid:
            return Finding("data dir", "fail", f"{path} belongs to uid {info.st_uid}, not to "
                           f"this user (uid {uid})",
                           f"run treemail as uid {info.st_uid}, or chown -R {uid} {data_dir}")
        if stat.S_IMODE(info.st_mode) & _OTHERS and not stat.S_ISLNK(info.st_mode):
            open_to_others.append(f"{path} ({stat.S_IMODE(info.st_mode):04o})")
    if open_to_others:
        shown = ", ".join(open_to_others[:3]) + (
            f" and {len(open_to_others) - 3} more" if len(open_to_others) > 3 else "")
        return Finding("data dir", "fail", f"open to other users: {shown}",
                       f"run chmod -R go-rwx {data_dir}")
    return Finding("data dir", "ok", f"{data_dir} is private to this user (directories "
                   "0700, files 0600)")


def _kept_paths(data_dir: Path) -> Iterator[Path]:
    """The data directory and what treemail keeps in it, recursively (not the socket, whose
    mode the listener sets, nor anything else the user put there)."""
    yield data_dir
    for name in _KEPT:
        top = data_dir / name
        if top.is_symlink() or not top.exists():
            continue
        yield top
        if top.is_dir():
            yield from (p for p in sorted(top.rglob("*")) if not p.is_symlink())


def _config(data_dir: Path) -> tuple[Any, Finding]:
    from treemail.adapters.daemon.settings import CONFIG_FILE, Settings
    from treemail.core.errors import ConfigError

    try:
        settings = Settings.load(data_dir)
    except ConfigError as error:
        return None, Finding("config", "fail", error.message,
                             "fix it: the daemon will not start with it (spec/config.md)")
    where = data_dir / CONFIG_FILE
    if not where.exists():
        return settings, Finding("config", "ok", f"no {where}: every key at its default "
                                 "(the offline scripted model)")
    return settings, Finding("config", "ok", f"{where} decodes; {settings.describe()}")


def _store(url: str, *, given: bool) -> Finding:
    from treemail.adapters.store.factory import Kind, open_store, parse
    from treemail.adapters.store.verify import RawRows, verify
    from treemail.core.errors import StorageError, TreemailError

    try:
        where = parse(url)
        if where.kind is Kind.LMDB and not given and not Path(where.location).exists():
            return Finding("store", "warn", f"no store at {where.location} yet",
                           "the daemon creates it at its first start: `treemail daemon`")
        store = open_store(url, readonly=True)  # takes no lock: the owner keeps it
    except TreemailError as error:
        return Finding("store", "fail", f"cannot open {url}: {error.message}",
                       "`treemail verify` says more; restore it from a backup if damaged")
    try:
        if not isinstance(store, RawRows):
            return Finding("store", "ok", f"{url} opens (it keeps no bytes to verify)")
        report = verify(store)
    except StorageError as error:
        return Finding("store", "fail", f"{url}: {error.message}",
                       "restore the store from a backup")
    finally:
        store.close()
    if report.problems:
        return Finding("store", "fail", f"{url}: {len(report.problems)} damaged record(s) "
                       f"or index(es), first: {report.problems[0]}",
                       "`treemail verify` lists them; restore the store from a backup")
    return Finding("store", "ok", f"{url} opens read-only and verifies ({report.records} "
                   "records)")


async def _daemon(args: argparse.Namespace) -> Finding:
    from treemail.adapters.daemon.client import DaemonClient, RpcFailure
    from treemail.core.errors import TreemailError
    from treemail.protocol.methods import PROTOCOL_VERSION

    try:
        address, token = target(args)
    except TokenMissing as missing:
        return Finding("daemon", "fail", str(missing), "set TREEMAIL_TOKEN or --token-file")
    try:
        async with asyncio.timeout(args.timeout):
            client = await DaemonClient.connect(address, name="treemail doctor", token=token,
                                                timeout=args.timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        return Finding("daemon", "warn", f"no daemon answers at {address}",
                       "start one with `treemail daemon` (clients need it; this check "
                       "needs nothing more)")
    except RpcFailure as failure:
        return Finding("daemon", "fail", f"the daemon at {address} refused this client: "
                       f"{failure.error.message}",
                       f"run the treemail that matches it (this one speaks protocol "
                       f"{PROTOCOL_VERSION})")
    except (TimeoutError, TreemailError, OSError) as error:
        why = "it did not answer in time" if isinstance(error, TimeoutError) else str(error)
        return Finding("daemon", "fail", f"the daemon at {address} is not usable: {why}",
                       "if it hangs, stop it (SIGTERM) and start it again")
    await client.close()
    server = client.server
    assert server is not None  # connect returns only after the handshake
    return Finding("daemon", "ok", f"{address} answers: {server.server_info.name} "
                   f"{server.server_info.version}, protocol {server.protocol_version}")


def _model(settings: Any, timeout: float) -> Finding:
    from treemail.adapters.runtime.llm import unreachable_hint

    if settings.model != "openai":
        return Finding("model", "ok", f"{settings.model}: offline, no endpoint to reach")
    base = settings.openai.base_url
    if not base:
        return Finding("model", "fail", "model = openai without a base_url",
                       "set [daemon.openai] base_url, e.g. http://localhost:8000/v1")
    if not base.lower().startswith(("http://", "https://")):
        return Finding("model", "fail", f"base_url {base!r} cannot be reached",
                       unreachable_hint(base))
    variable = settings.openai.api_key_env
    key = os.environ.get(variable) or None
    return _ask_models(base, key, variable, settings.openai.model, timeout)


def _ask_models(base: str, key: str | None, variable: str, model: str,
                timeout: float) -> Finding:
    """``GET BASE_URL/models``: the cheapest request that proves the endpoint is there and
    takes the key."""
    import httpx

    url = base.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(url, headers=headers, timeout=timeout)
    except httpx.TimeoutException:
        return Finding("model", "fail", f"{url} did not answer within {timeout:g}s",
                       "check that the server is running and not overloaded")
    except httpx.HTTPError as error:
        return Finding("model", "fail", f"cannot reach {url}: {error}",
                       "check base_url and that the server is running")
    status = response.status_code
    if status in (401, 403):
        hint = (f"export {variable} with a valid key" if key is None else
                f"the key in {variable} is refused: check it, and that it is for this "
                "endpoint")
        return Finding("model", "fail", f"{url} refused the key (HTTP {status})", hint)
    if status == 404:
        return Finding("model", "warn", f"{url} answered HTTP 404: the endpoint lists no "
                       "models", "chat/completions may still work; check base_url's path")
    if not response.is_success:
        return Finding("model", "fail", f"{url} answered HTTP {status}",
                       "the endpoint is failing: check its logs, or try again later")
    listed = _model_ids(response)
    if model and listed is not None and model not in listed:
        return Finding("model", "warn", f"{url} answers, but model {model!r} is not among "
                       f"the {len(listed)} it lists", "check [daemon.openai] model")
    keyed = "with the key" if key else f"with no key ({variable} unset)"
    return Finding("model", "ok", f"{url} answers {keyed} (HTTP {status})")


def _model_ids(response: Any) -> set[str] | None:
    """The ids of an OpenAI-style model list (``{"data": [{"id": ...}]}``), None if the
    answer is not one."""
    try:
        data = response.json().get("data")
    except (ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    return {str(item.get("id")) for item in data if isinstance(item, dict)}
