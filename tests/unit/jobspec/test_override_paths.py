"""A path anywhere in an override value goes through the path rules, as a value that is a
path does: inside lists and quotes, after commas, ``=``, ``:`` and interpolations (tables).
"""

from __future__ import annotations

import pytest

from service.domain.workloads import owned_keys
from service.jobspec.overrides import check_override
from service.jobspec.sandbox import PathRules

ROOTS = ("/private",)
OUTSIDE = "is outside the allowed roots (/private)"
ALICE = PathRules.make(ROOTS, users_root="/private/users", own="/private/users/alice")


def _check(text: str, roots=ROOTS) -> str | None:
    return check_override(text, owned_keys("ppo"), roots)


@pytest.mark.parametrize(("override", "problem"), [
    # the two reproductions: a path in a nested list, a path after an interpolation
    ("+my.x=[[/etc/passwd]]", f"'my.x' holds a path ('/etc/passwd'): '/etc/passwd' {OUTSIDE}"),
    ("+my.x=${my.e}/etc/passwd",
     f"'my.x' holds a path ('/etc/passwd'): '/etc/passwd' {OUTSIDE}"),
    # quotes
    ("+my.x='a /etc/passwd'", "'my.x' holds a path ('/etc/passwd')"),
    ('+my.x="x:/etc/shadow"', "'my.x' holds a path ('/etc/shadow')"),
    ("+my.x=['ok', \"/root/.ssh/id_rsa\"]", f"'/root/.ssh/id_rsa' {OUTSIDE}"),
    ("+my.x='/private/ok x/../../etc'", "contains characters not allowed in paths: ' '"),
    ("+my.x='/private/a,b/../../../etc'", "contains characters not allowed in paths: ','"),
    # commas, lists, =, :
    ("+my.x=[a,/etc/passwd]", f"'my.x' takes a path: '/etc/passwd' {OUTSIDE}"),  # an item
    ("+my.x=[a, b, [c, /etc/passwd]]", "'my.x' takes a path: contains characters"),
    ("+my.x=[a, [/etc/passwd, b]]", "'my.x' holds a path ('/etc/passwd')"),
    ("+my.x=a,/etc/passwd", "'my.x' holds a path ('/etc/passwd')"),
    ("+my.x=str(value=/etc/passwd)", "'my.x' holds a path ('/etc/passwd')"),
    ("+my.x=str(/etc/passwd)", "'my.x' holds a path ('/etc/passwd')"),
    ("+my.x=a:/etc/passwd", "'my.x' holds a path ('/etc/passwd')"),
    ("+my.x=a=/etc/passwd", "'my.x' holds a path ('/etc/passwd')"),
    ("+my.x=x /etc/passwd", "'my.x' holds a path ('/etc/passwd')"),
    ("+my.x=x,file:///etc/passwd", "'my.x' holds a path ('/etc/passwd')"),
    ("+my.x=pkg:///etc/passwd", "'my.x' holds a path ('/etc/passwd')"),
    # nested interpolation
    ("+my.x=${oc.select:my.a,/etc/passwd}", "'my.x' holds a path ('/etc/passwd')"),
    ("+my.x=${my.${my.k}}/etc/passwd", "'my.x' holds a path ('/etc/passwd')"),
    ("+my.x=${oc.select:my.a,${my.b}/etc}", "'my.x' holds a path ('/etc')"),
    ("+my.x='${my.a}/etc/passwd'", "'my.x' holds a path ('/etc/passwd')"),
    ("+my.x=${my.a}/${my.b}", "'my.x' holds a path completed by an interpolation ('/${my.b')"),
    ("+my.x=a /private/${my.up}/etc",
     "'my.x' holds a path completed by an interpolation ('/private/${my.up')"),
    ("+my.x=[x, [/private/data/${my.name}]]", "holds a path completed by an interpolation"),
    ("+my.x=/private/${my.up}/etc", "'my.x' takes a path: contains characters not allowed in "
     "paths: '${}'"),  # a value that is a path, as before
    # the path rules themselves: .., //, characters, look-alikes, home directories
    ("+my.x=[x, [/private/../etc/passwd]]", f"'/etc/passwd' {OUTSIDE}"),
    ("+my.x=${a}/private/../../etc", f"'/etc' {OUTSIDE}"),
    ("+my.x=${a}//etc/passwd", f"'/etc/passwd' {OUTSIDE}"),
    ("+my.x=[/private/a%x/../../etc]", "contains characters not allowed in paths: '%'"),
    ("+my.x=[/private/\uff41]", "contains characters not allowed in paths"),
    ("+my.x=\u2215etc\u2215passwd", "'my.x': '\u2215' (U+2215) looks like '/'"),
    ("+my.x=[x, \uff0fetc\uff0fpasswd]", "'my.x': '\uff0f' (U+FF0F) looks like '/'"),
    ("+my.x=[~/.ssh/id_rsa]", "must be an absolute path, got '~/.ssh/id_rsa'"),
    ("+my.x=a,~root/.bashrc", "must be an absolute path, got '~root/.bashrc'"),
    # a path-valued key or a path value as before, more found in it
    ("+data.extra_files=[/private/a, x:/etc/b]", "'data.extra_files' takes a path"),
])
def test_a_path_anywhere_in_a_value_is_checked(override: str, problem: str) -> None:
    message = _check(override)
    assert message is not None and problem in message, message


@pytest.mark.parametrize(("override", "problem"), [
    ("+my.x=[[/private/users/bob/secret]]", "is in user bob's tree"),
    ("+my.x=${my.e}/private/users/bob/x", "is in user bob's tree"),
])
def test_other_users_trees_stay_private_wherever_the_path_stands(override: str,
                                                                problem: str) -> None:
    message = _check(override, ALICE)
    assert message is not None and problem in message, message


@pytest.mark.parametrize("override", [
    "+my.x=[[/private/data/a.parquet]]",
    "+my.x=${my.e}/private/data",
    "+my.x=[/private/a,/private/b]",
    "+my.x=${oc.select:my.a,/private/default}",
    "+my.x='a /private/x'",
    "+my.x=[file:///private/m.py, pkg://my_pkg.mod]",
    "+my.x=pkg://my_pkg.mod",
    "+my.ratio=1/2",
    "+my.ratio=${my.a}x/2",
    "+my.repo=org/name",
    "+my.rel=runs/a/b",
    "+my.date=2025/01/01",
    "+my.stop=['</answer>', '</tool_call>']",
    "+my.tag=${trainer.project_name}-${trainer.experiment_name}",
    "+my.x=a~/b",
    "+my.x=${oc.select:trainer.nnodes,1}",
])
def test_values_without_a_path_outside_the_rules_pass(override: str) -> None:
    assert _check(override) is None


def test_the_own_tree_is_allowed_wherever_the_path_stands() -> None:
    assert _check("+my.x=${my.e}/private/users/alice/x", ALICE) is None
    assert _check("+my.x=[[/private/users/alice/data]]", ALICE) is None
