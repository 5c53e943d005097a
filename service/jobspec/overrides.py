"""The override policy: which Hydra overrides a JobSpec may carry to verl, and why not.

An override is ``key=value`` (key: an optional leading ``+``, ``++`` or ``~``, then
dotted identifiers ``[A-Za-z_][A-Za-z0-9_]*``, each optionally followed by one
``[index]``; ``~key`` may omit ``=value``; value: any printable characters, possibly
empty: each override is one argv token, shell-quoted when the entrypoint is joined).
Config-group overrides (``group/option=...``, ``@package``) are not accepted.

The job runs the user's own code (``code_path``), so the policy is not about stopping
code from running; it keeps what Argus owns and what reaches outside the job's sandbox
(files outside the allowed roots, other hosts, the node's environment) out of reach of a
JobSpec. Refused, each with its reason (classes read off verl 0.9.1's config tree):

* keys Argus sets for the workload (``service.domain.workloads.owned_keys``) and any parent of
  one (``trainer``, ``~data``): use the JobSpec field instead;
* ``hydra.*`` and ``hydra/...`` config groups: Argus sets ``hydra.run.dir`` and
  ``hydra.sweep.dir`` to the attempt's job directory; search paths, launchers, callbacks
  and ``hydra.job.env_set`` would load config or code from elsewhere or set the env;
* ``ray_kwargs.ray_init.*`` (and ``~ray_kwargs``), and ``runtime_env`` / ``env_vars`` /
  ``ray_init`` anywhere: how the driver joins Ray and the job's environment
  (``+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH=...``, ``py_executable``);
* TransferQueue storage placement: ``transfer_queue.backend.SimpleStorage.
  required_node_resource``, ``transfer_queue.backend.storage_backend`` and their parents
  (``~transfer_queue``): Argus pins storage actors to worker nodes; and
  ``transfer_queue.backend.MooncakeStore.*``, which names hosts and starts or kills
  servers on the node;
* ``_target_``, ``_partial_``, ``_args_``, ``_recursive_``, ``_convert_`` anywhere:
  Hydra instantiation names code to import and call;
* network addresses: ``*.url``, ``*_url``, ``*.address``, ``*_address``, ``*_server``,
  ``*.host``, ``*_host``, ``*.hostname``, ``*_hostname`` (``sandbox_fusion.url``,
  Mooncake servers...), and any value holding a URL (``scheme://``) other than ``file://`` and ``pkg://``;
* shell commands: ``*.cmd``, ``*_cmd``, ``*.command`` (``profiler.finish_hook_cmd``);
* ``*.prometheus.*``: the rollout's Prometheus export rewrites the Ray cluster's
  Prometheus configuration file and opens a port on the node;
* ``*.use_shm``: copies the model into the node's ``/dev/shm``, outside the job's
  storage and shared with every job on that node;
* values reading the driver's environment (``${oc.env:...}``, ``${env:...}``), which
  holds the operator's settings and secrets;
* Hydra dict values (``key={a: 1}``): they could set any key below ``key`` unseen; set
  each key with its own dotted override instead.

Checked, then accepted:

* path-valued keys (last part ``path``, ``dir``, ``file``, ``files``, ``*_path``,
  ``*_paths``, ``*_dir``, ``*_dirs``, ``*_file``, ``*_files``, or ``data.tokenizer``:
  reward functions, custom dataset classes, model/tokenizer paths, data and dump
  directories...): the value is ``null``, empty, a path under the allowed roots (the
  JobSpec's path rules, ``file://`` allowed), a list of such paths, ``pkg://<module>``
  (a module on the job's ``PYTHONPATH``), or for model and tokenizer keys a Hugging Face
  repo id;
* any other value that holds a path is checked the same way: a path begins at each ``/``
  (or ``~/``, ``~user/``) that starts the value or follows whitespace or one of
  ``[ ] ( ) { } , = : ' "`` (a list item, an argument, a quoted string, what follows an
  interpolation ``${...}``, ``file://``), and runs to the end of its quoted string, or of
  its unquoted item (up to ``, [ ] ( ) }``, a ``{`` that opens no interpolation, or a
  quote), so anything glued to it (an interpolation, a space, a ``%``) is part of it and
  breaks the character rule:
  ``+my.x=[[/etc/passwd]]``, ``+my.x=${my.e}/etc/passwd`` and ``+my.x=/ok/${my.e}`` are
  refused, ``1/2``, ``org/name`` and ``</answer>`` are no paths. A character that looks like
  ``/`` (U+2215, U+2044, U+29F8, U+FF0F) is refused in any value;
* module-name keys (``*.external_lib``, ``*.custom_backend_module``,
  ``*.checkpoint_callback_class``): a dotted Python name, resolved on the job's
  ``PYTHONPATH`` (``code_path`` first, then the image's packages), or null.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from service.jobspec.sandbox import Roots, SandboxError, check_path, describe, is_hf_repo_id

_SEGMENT = r"[A-Za-z_][A-Za-z0-9_]*(?:\[[0-9]+\])?"
_OVERRIDE_RE = re.compile(
    rf"(?P<op>\+\+|\+|~)?(?P<key>{_SEGMENT}(?:\.{_SEGMENT})*)(?:=(?P<value>.*))?",
    re.DOTALL,
)
_INDEX_RE = re.compile(r"\[[0-9]+\]")
_HYDRA_GROUP_RE = re.compile(r"(?:\+\+|\+|~)?hydra[/@]")
SHAPE = ("must be a Hydra override 'key=value' (key: dotted identifiers with optional "
         "[index], optionally led by +, ++ or ~)")


@dataclass(frozen=True, slots=True)
class Rule:
    """A class of keys a JobSpec may not override.

    ``pattern``: dotted; a segment ``*`` matches one key part, ``**`` any number of parts
    (none included), and ``*`` inside a segment any characters (``*_url``). Overriding or
    removing a parent of a matching key (``~transfer_queue``) is refused too, for the
    parents spelt out in the pattern before its first wildcard.
    """

    pattern: str
    what: str
    why: str


_HYDRA = ("Hydra's own settings", "Argus sets the run and sweep directories to the "
          "attempt's job directory; search paths, launchers and callbacks would load "
          "config or code from elsewhere")
_RAY = ("how the driver joins Ray", "Argus sets the cluster address and the job's runtime "
        "environment (env_vars, PYTHONPATH, py_executable)")
_ENV = ("the job's environment", "Argus sets it from its config and the JobSpec's code_path")
_TQ = ("TransferQueue storage placement", "Argus pins storage actors to worker nodes; "
       "without the pin they land on the 0-CPU head and the job cannot start")
_MOONCAKE = ("TransferQueue's Mooncake store", "it names hosts to connect to and starts or "
             "kills servers on the node")
_INSTANTIATE = ("Hydra instantiation", "it names code to import and call")
_HOST = ("a network address", "a job reaches only its Ray cluster and the allowed storage")
_COMMAND = ("a shell command", "verl would run it on the nodes outside the job's entrypoint")
_PROMETHEUS = ("the rollout's Prometheus export", "it rewrites the Ray cluster's Prometheus "
               "configuration file and opens a port on the node")
_SHM = ("a copy into /dev/shm", "it fills the node's shared memory, outside the job's "
        "storage and shared with every job on the node")

RULES: tuple[Rule, ...] = (
    Rule("hydra.**", *_HYDRA),
    Rule("ray_kwargs.ray_init.**", *_RAY),
    Rule("**.ray_init.**", *_RAY),
    Rule("**.runtime_env.**", *_ENV),
    Rule("**.env_vars.**", *_ENV),
    Rule("transfer_queue.backend.SimpleStorage.required_node_resource", *_TQ),
    Rule("transfer_queue.backend.storage_backend", *_TQ),
    Rule("transfer_queue.backend.MooncakeStore.**", *_MOONCAKE),
    *(Rule(f"**.{name}", *_INSTANTIATE)
      for name in ("_target_", "_partial_", "_args_", "_recursive_", "_convert_")),
    *(Rule(f"**.{name}", *_HOST)
      for name in ("url", "*_url", "address", "*_address", "*_server", "host", "*_host",
                   "hostname", "*_hostname")),
    *(Rule(f"**.{name}", *_COMMAND) for name in ("cmd", "*_cmd", "command")),
    Rule("**.prometheus.**", *_PROMETHEUS),
    Rule("**.use_shm", *_SHM),
)

_PATH_NAME_RE = re.compile(r"(?:.*_)?(?:path|paths|dir|dirs|file|files)")
_MODEL_NAMES = frozenset({"tokenizer", "tokenizer_path", "model_path", "hf_config_path",
                          "adapter_path", "lora_adapter_path"})
_MODULE_NAMES = frozenset({"external_lib", "custom_backend_module",
                           "checkpoint_callback_class"})
_DOTTED_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_ENV_INTERPOLATION_RE = re.compile(r"\$\{\s*(?:oc\.)?env\s*:")
_URL_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
_QUOTED_RE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_INTERPOLATION_RE = re.compile(r"\$\{[^{}]*\}")
# where a path may begin (a "/" or "~/", "~user/" that starts a string Hydra hands on), and
# where an unquoted one ends
_PATH_START_RE = re.compile(r"(?:^|(?<=[\s\[\](){},=:'\"]))(?:~[A-Za-z0-9._-]*)?/")
_ITEM_END_RE = re.compile(r"[,\[\]()}'\"]|(?<!\$)\{")  # "${" stays in: a path glued to it
_SLASH_LOOKALIKES = "\u2044\u2215\u29f8\uff0f"  # fraction, division, big, full-width


def _segment_regex(segment: str) -> str:
    if segment == "*":
        return r"[^.]+"
    return "[^.]*".join(re.escape(part) for part in segment.split("*"))


def _rule_regex(pattern: str) -> str:
    out = ""
    for index, segment in enumerate(pattern.split(".")):
        if segment == "**":
            out += r"(?:[^.]+\.)*" if index == 0 else r"(?:\.[^.]+)*"
        else:
            out += ("" if index == 0 or out.endswith(r"\.)*") else r"\.")
            out += _segment_regex(segment)
    return out


def _rule_parents(pattern: str) -> list[str]:
    literal = []
    for segment in pattern.split("."):
        if "*" in segment:
            break
        literal.append(segment)
    return [".".join(literal[:n]) for n in range(1, len(literal))]


# One alternation for every rule (group r<i> is rule i): one match per key, not one per rule.
_RULES_RE = re.compile("|".join(f"(?P<r{i}>{_rule_regex(rule.pattern)})"
                                for i, rule in enumerate(RULES)))
_PARENTS = {parent: rule for rule in reversed(RULES) for parent in _rule_parents(rule.pattern)}


def refused_by(key: str) -> str | None:
    """Why ``key`` (dotted, indices removed) may not be overridden, or None."""
    match = _RULES_RE.fullmatch(key)
    if match:
        rule = RULES[int(match.lastgroup[1:])]
        return f"'{key}' is refused ({rule.what}): {rule.why}"
    rule = _PARENTS.get(key)
    if rule is not None:
        return (f"'{key}' is refused: it holds {rule.pattern.rstrip('.*')} "
                f"({rule.what}): {rule.why}")
    return None


def _owned(key: str, owned: Mapping[str, str | None]) -> str | None:
    hits = [k for k in owned if k == key or k.startswith(key + ".")]
    if hits == [key]:
        source = owned[key]
        hint = f"use the JobSpec field '{source}'" if source else "it cannot be overridden"
        return f"'{key}' is set by Argus; {hint}"
    if hits:
        return f"'{key}' would replace keys set by Argus: {', '.join(hits)}"
    return None


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _list_items(value: str) -> list[str] | None:
    value = value.strip()
    if not (value.startswith("[") and value.endswith("]")):
        return None
    inner = value[1:-1].strip()
    return [_unquote(item) for item in inner.split(",")] if inner else []


def _check_path_value(key: str, value: str, roots: Roots) -> str | None:
    name = key.rsplit(".", 1)[-1]
    model_like = name in _MODEL_NAMES or key.endswith("model.path")
    items = _list_items(value)
    for item in [_unquote(value)] if items is None else items:
        if item in ("", "null"):
            continue
        if item.startswith("pkg://") and _DOTTED_RE.fullmatch(item[len("pkg://"):]):
            continue
        if model_like and not item.startswith("/") and is_hf_repo_id(item):
            continue
        path = item[len("file://"):] if item.startswith("file://") else item
        try:
            check_path(path, roots)
        except SandboxError as exc:
            kinds = "a path or a Hugging Face repo id" if model_like else "a path"
            return f"'{key}' takes {kinds}: {exc}"
    return None


def _first_path(text: str) -> list[str]:
    match = _PATH_START_RE.search(text)
    return [] if match is None else [text[match.start():]]


def _paths_in(value: str) -> list[str]:
    """Every path ``value`` holds (see the module docstring): the first path of each quoted
    string, to its end, and of each unquoted item, to its end less trailing blanks (Hydra
    trims them). ``scheme://`` is dropped first: the URL rule left only ``file://``, whose
    path follows, and ``pkg://``, whose module name is no path."""
    text = _URL_RE.sub("", value)
    found: list[str] = []
    pos = 0
    for quoted in [*_QUOTED_RE.finditer(text), None]:
        unquoted = text[pos:] if quoted is None else text[pos:quoted.start()]
        for item in _ITEM_END_RE.split(unquoted):
            found += _first_path(item.rstrip())
        if quoted is not None:
            found += _first_path(quoted.group()[1:-1])
            pos = quoted.end()
    return found


def _check_paths_in(key: str, value: str, roots: Roots) -> str | None:
    for ch in _SLASH_LOOKALIKES:
        if ch in value:
            return (f"'{key}': {ch!r} (U+{ord(ch):04X}) looks like '/'; write paths with "
                    "'/' so that the path rules can check them")
    for path in _paths_in(value):
        shown = path if len(path) <= 60 else path[:57] + "..."
        if "${" in path:
            return (f"'{key}' holds a path completed by an interpolation ({shown!r}): the "
                    "path rules cannot check what it resolves to; write the whole path")
        try:
            check_path(path, roots)
        except SandboxError as exc:
            return f"'{key}' holds a path ({shown!r}): {exc}"
    return None


def _check_value(key: str, value: str, roots: Roots) -> str | None:
    if _ENV_INTERPOLATION_RE.search(value):
        return (f"'{key}': values may not read the driver's environment (${{oc.env:...}}): "
                "it holds the operator's settings")
    bare = _QUOTED_RE.sub("''", value)
    while True:  # innermost interpolations first: ${a.${b}}
        stripped = _INTERPOLATION_RE.sub("0", bare)
        if stripped == bare:
            break
        bare = stripped
    if "{" in bare:
        return (f"'{key}': dict values are not accepted; set each key with its own "
                "dotted override (a.b.c=1), so each can be checked")
    for match in _URL_RE.finditer(value):
        if match["scheme"] not in ("file", "pkg"):
            return f"'{key}': URLs are not accepted ({_HOST[1]})"
    return _check_typed(key, value, roots) or _check_paths_in(key, value, roots)


def _check_typed(key: str, value: str, roots: Roots) -> str | None:
    """The rules of module-name and path-valued keys, and of values (or list items) that
    are a path as a whole."""
    name = key.rsplit(".", 1)[-1]
    if name in _MODULE_NAMES:
        items = _list_items(value)
        for item in [_unquote(value)] if items is None else items:
            if item not in ("", "null") and not _DOTTED_RE.fullmatch(item):
                return (f"'{key}' names a Python module: must be a dotted name, found on "
                        f"the job's PYTHONPATH, got {describe(item)}")
        return None
    if _PATH_NAME_RE.fullmatch(name) or key == "data.tokenizer":
        return _check_path_value(key, value, roots)
    items = _list_items(value)
    for item in [_unquote(value)] if items is None else items:
        if item.startswith("/") or item.startswith("file://"):
            problem = _check_path_value(key, item, roots)
            if problem:
                return problem
    return None


def check_override(text: str, owned: Mapping[str, str | None], roots: Roots
                   ) -> str | None:
    """Why the override ``text`` is refused, or None when it may go to verl.

    ``owned``: the keys Argus sets for the workload (``owned_keys``), or empty when the
    workload is unknown. ``roots``: the job's ``PathRules`` (or the normalised allowed
    roots).
    """
    if _HYDRA_GROUP_RE.match(text):
        return f"'hydra' config groups are refused ({_HYDRA[0]}): {_HYDRA[1]}"
    match = _OVERRIDE_RE.fullmatch(text)
    if match is None or (match["value"] is None and match["op"] != "~"):
        return f"{SHAPE}, got {describe(text)}"
    key = _INDEX_RE.sub("", match["key"])
    reason = _owned(key, owned) or refused_by(key)
    if reason is None and match["value"] is not None:
        reason = _check_value(key, match["value"], roots)
    return reason
