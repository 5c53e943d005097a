"""The override policy, by table: each refused class with its reason, each path rule."""

from __future__ import annotations

import pytest

from service.domain.workloads import owned_keys
from service.jobspec.overrides import RULES, check_override, refused_by

ROOTS = ("/private",)
OUTSIDE = "is outside the allowed roots (/private)"


def _check(text: str, workload: str = "ppo") -> str | None:
    return check_override(text, owned_keys(workload), ROOTS)


# -- refused classes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        # Hydra: its keys and its config groups
        ("hydra.run.dir=/etc", "'hydra.run.dir' is set by Argus; it cannot be overridden"),
        ("hydra.sweep.dir=/private/x",
         "'hydra.sweep.dir' is set by Argus; it cannot be overridden"),
        ("hydra.searchpath=[file:///etc]", "'hydra.searchpath' is refused (Hydra's own "
         "settings)"),
        ("+hydra.job.env_set.PYTHONPATH=/x", "'hydra.job.env_set.PYTHONPATH' is refused "
         "(Hydra's own settings)"),
        ("~hydra", "'hydra' would replace keys set by Argus: hydra.run.dir, hydra.sweep.dir"),
        ("hydra/launcher=basic", "'hydra' config groups are refused (Hydra's own settings)"),
        ("+hydra/callbacks=x", "'hydra' config groups are refused (Hydra's own settings)"),
        # how the driver joins Ray, the job's environment
        ("+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH=/private/evil",
         "'ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH' is refused (how the driver "
         "joins Ray)"),
        ("ray_kwargs.ray_init.runtime_env.py_executable=sh",
         "'ray_kwargs.ray_init.runtime_env.py_executable' is refused (how the driver joins "
         "Ray)"),
        ("+ray_kwargs.ray_init.address=10.0.0.1:6379",
         "'ray_kwargs.ray_init.address' is refused (how the driver joins Ray)"),
        ("~ray_kwargs", "'ray_kwargs' is refused: it holds ray_kwargs.ray_init (how the "
         "driver joins Ray)"),
        ("+reward.ray_init.num_cpus=1", "'reward.ray_init.num_cpus' is refused (how the "
         "driver joins Ray)"),
        ("+a.runtime_env.pip=[evil]", "'a.runtime_env.pip' is refused (the job's "
         "environment)"),
        ("+a.env_vars.LD_PRELOAD=/private/x.so", "'a.env_vars.LD_PRELOAD' is refused (the "
         "job's environment)"),
        # TransferQueue storage: removing or re-pinning it
        ("~transfer_queue", "'transfer_queue' is refused: it holds transfer_queue.backend."
         "SimpleStorage.required_node_resource (TransferQueue storage placement)"),
        ("transfer_queue.backend={}", "'transfer_queue.backend' is refused: it holds "
         "transfer_queue.backend.SimpleStorage.required_node_resource"),
        ("~transfer_queue.backend.SimpleStorage", "'transfer_queue.backend.SimpleStorage' is "
         "refused: it holds"),
        ("+transfer_queue.backend.SimpleStorage.required_node_resource=head",
         "'transfer_queue.backend.SimpleStorage.required_node_resource' is refused "
         "(TransferQueue storage placement): Argus pins storage actors to worker nodes"),
        ("++transfer_queue.backend.SimpleStorage.required_node_resource=head",
         "'transfer_queue.backend.SimpleStorage.required_node_resource' is refused"),
        ("transfer_queue.backend.storage_backend=MooncakeStore",
         "'transfer_queue.backend.storage_backend' is refused (TransferQueue storage "
         "placement)"),
        ("transfer_queue.backend.MooncakeStore.auto_init=true",
         "'transfer_queue.backend.MooncakeStore.auto_init' is refused (TransferQueue's "
         "Mooncake store)"),
        ("transfer_queue.backend.MooncakeStore.metadata_server=evil:1",
         "'transfer_queue.backend.MooncakeStore.metadata_server' is refused (TransferQueue's "
         "Mooncake store)"),
        # Hydra instantiation: code to import and call
        ("actor_rollout_ref.actor._target_=os.system",
         "'actor_rollout_ref.actor._target_' is refused (Hydra instantiation)"),
        ("+a._args_=[rm]", "'a._args_' is refused (Hydra instantiation)"),
        ("+_target_=x", "'_target_' is refused (Hydra instantiation)"),
        ("algorithm.kl_ctrl._partial_=true", "'algorithm.kl_ctrl._partial_' is refused"),
        # hosts
        ("sandbox_fusion.url=http://10.0.0.9/run", "'sandbox_fusion.url' is refused (a "
         "network address)"),
        ("reward.sandbox_fusion.url=x", "'reward.sandbox_fusion.url' is refused (a network "
         "address)"),
        ("+a.master_address=10.0.0.1", "'a.master_address' is refused (a network address)"),
        ("+a.metadata_server=h:1", "'a.metadata_server' is refused (a network address)"),
        ("+a.local_hostname=h", "'a.local_hostname' is refused (a network address)"),
        ("+a.host=h", "'a.host' is refused (a network address)"),
        ("+a.b=http://10.0.0.9/x", "'a.b': URLs are not accepted"),
        ("trainer.default_hdfs_dir=hdfs://namenode/ckpt",
         "'trainer.default_hdfs_dir': URLs are not accepted"),
        # commands, metrics exports, /dev/shm
        ("global_profiler.finish_hook_cmd=rm -rf /private",
         "'global_profiler.finish_hook_cmd' is refused (a shell command)"),
        ("actor_rollout_ref.actor.profiler.finish_hook_cmd=x",
         "'actor_rollout_ref.actor.profiler.finish_hook_cmd' is refused (a shell command)"),
        ("actor_rollout_ref.rollout.prometheus.enable=True",
         "'actor_rollout_ref.rollout.prometheus.enable' is refused (the rollout's Prometheus "
         "export)"),
        ("actor_rollout_ref.model.use_shm=True",
         "'actor_rollout_ref.model.use_shm' is refused (a copy into /dev/shm)"),
        ("data.use_shm=True", "'data.use_shm' is refused (a copy into /dev/shm)"),
        # values that read the environment or hide keys in a dict
        ("+a.b=${oc.env:AWS_SECRET_ACCESS_KEY}",
         "'a.b': values may not read the driver's environment"),
        ("+a.b='${oc.env:TOKEN}'", "'a.b': values may not read the driver's environment"),
        ("+a.b=${ env:TOKEN}", "'a.b': values may not read the driver's environment"),
        ("actor_rollout_ref.actor={_target_: os.system}",
         "'actor_rollout_ref.actor': dict values are not accepted"),
        ("+a.b=[{x: 1}]", "'a.b': dict values are not accepted"),
        # the shape itself
        ("a/b=c", "must be a Hydra override 'key=value'"),
        ("model@model=x", "must be a Hydra override 'key=value'"),
    ],
)
def test_refused_with_the_reason(override: str, reason: str) -> None:
    message = _check(override)
    assert message is not None, override
    assert message.startswith(reason), message


def test_every_rule_gives_a_reason_with_its_class() -> None:
    for rule in RULES:
        key = rule.pattern.replace("**.", "x.").replace(".**", ".y").replace("*", "z")
        assert refused_by(key) is not None, rule.pattern


# -- path-valued overrides ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "problem"),
    [
        ("custom_reward_function.path=/private/rewards/gsm8k.py", None),
        ("custom_reward_function.path=/etc/evil.py",
         f"'custom_reward_function.path' takes a path: '/etc/evil.py' {OUTSIDE}"),
        ("custom_reward_function.path=/private/../etc/evil.py",
         f"'custom_reward_function.path' takes a path: '/etc/evil.py' {OUTSIDE}"),
        ("custom_reward_function.path=rewards/fn.py",
         "'custom_reward_function.path' takes a path: must be an absolute path, got "
         "'rewards/fn.py' (a string)"),
        ("custom_reward_function.path=", None),
        ("custom_reward_function.path=null", None),
        ("reward.custom_reward_function.path='/private/r.py'", None),
        ("data.custom_cls.path=/private/datasets/mine.py", None),
        ("data.custom_cls.path=/tmp/mine.py",
         f"'data.custom_cls.path' takes a path: '/tmp/mine.py' {OUTSIDE}"),
        ("data.custom_cls.path=pkg://my_datasets.gsm8k", None),
        ("data.custom_cls.path=pkg://../x", "'data.custom_cls.path' takes a path: must be an "
         "absolute path"),
        ("reward.reward_manager.module.path=file:///private/m.py", None),
        ("reward.reward_manager.module.path=file:///etc/m.py",
         f"'reward.reward_manager.module.path' takes a path: '/etc/m.py' {OUTSIDE}"),
        ("reward_model.reward_loop_module_path=/private/loop.py", None),
        ("trainer.v1.sampler.custom_sampler.path=/home/x.py",
         f"'trainer.v1.sampler.custom_sampler.path' takes a path: '/home/x.py' {OUTSIDE}"),
        ("actor_rollout_ref.model.tokenizer_path=Qwen/Qwen2.5-0.5B-Instruct", None),
        ("actor_rollout_ref.model.tokenizer_path=/private/tok", None),
        ("actor_rollout_ref.model.tokenizer_path=/root/tok",
         "'actor_rollout_ref.model.tokenizer_path' takes a path or a Hugging Face repo id: "
         f"'/root/tok' {OUTSIDE}"),
        ("data.tokenizer=org/tok", None),
        ("data.tokenizer=/etc/tok", f"'data.tokenizer' takes a path or a Hugging Face repo "
         f"id: '/etc/tok' {OUTSIDE}"),
        ("reward.reward_model.model_path=/mnt/rm",
         f"'reward.reward_model.model_path' takes a path or a Hugging Face repo id: "
         f"'/mnt/rm' {OUTSIDE}"),
        ("actor_rollout_ref.model.lora_adapter_path=/private/lora", None),
        ("trainer.resume_from_path=/other/ckpt",
         f"'trainer.resume_from_path' takes a path: '/other/ckpt' {OUTSIDE}"),
        ("trainer.rollout_data_dir=/private/rollouts", None),
        ("skip.rollout.dump_dir=~/.verl/rollout_dump",
         "'skip.rollout.dump_dir' takes a path: must be an absolute path"),
        ("ray_kwargs.timeline_json_file=/private/t.json", None),
        ("ray_kwargs.timeline_json_file=/tmp/t.json",
         f"'ray_kwargs.timeline_json_file' takes a path: '/tmp/t.json' {OUTSIDE}"),
        ("actor_rollout_ref.rollout.multi_turn.tool_config_path=/private/tools.yaml", None),
        ("+data.extra_files=[/private/a.parquet,/private/b.parquet]", None),
        ("+data.extra_files=[/private/a.parquet, '/etc/b']",
         f"'data.extra_files' takes a path: '/etc/b' {OUTSIDE}"),
        ("data.custom_cls.path=${trainer.default_local_dir}/x.py",
         "'data.custom_cls.path' takes a path: must be an absolute path"),
        ("data.custom_cls.path=/private/a,b.py",
         "'data.custom_cls.path' takes a path: contains characters not allowed in paths"),
        # any value that is an absolute path is a path
        ("+argus_demo.model=/etc/passwd", f"'argus_demo.model' takes a path: '/etc/passwd' "
         f"{OUTSIDE}"),
        ("+argus_demo.inputs=[/private/a, /etc/b]",
         f"'argus_demo.inputs' takes a path: '/etc/b' {OUTSIDE}"),
        # module names: dotted names on the job's PYTHONPATH
        ("actor_rollout_ref.model.external_lib=my_models.qwen_patch", None),
        ("actor_rollout_ref.model.external_lib=/private/x.py",
         "'actor_rollout_ref.model.external_lib' names a Python module: must be a dotted "
         "name, found on the job's PYTHONPATH, got '/private/x.py' (a string)"),
        ("trainer.checkpoint_callback_class=my_pkg.callbacks.Upload", None),
        ("actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=null", None),
    ],
)
def test_path_valued_overrides(override: str, problem: str | None) -> None:
    message = _check(override)
    if problem is None:
        assert message is None, message
    else:
        assert message is not None and message.startswith(problem), message


def test_model_paths_argus_does_not_set_are_checked_per_workload() -> None:
    assert _check("critic.model.path=/private/x", "ppo") == (
        "'critic.model.path' is set by Argus; use the JobSpec field 'model_id'")
    assert _check("critic.model.path=/private/x", "grpo") is None
    assert _check("critic.model.path=Qwen/Qwen2.5-7B", "grpo") is None
    assert _check("critic.model.path=/x", "grpo") == (
        f"'critic.model.path' takes a path or a Hugging Face repo id: '/x' {OUTSIDE}")


# -- what stays allowed ------------------------------------------------------------------


@pytest.mark.parametrize(
    "override",
    [
        "actor_rollout_ref.rollout.name=vllm",
        "trainer.val_before_train=False",
        "+argus_demo.duration_s=5",
        "data.max_prompt_length=512",
        "transfer_queue.enable=True",
        "transfer_queue.metrics.enabled=true",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=4",
        "actor_rollout_ref.model.trust_remote_code=True",
        "custom_reward_function.name=compute_score",
        "+a.b=${trainer.project_name}-x",
        "+a.b=${oc.select:trainer.nnodes,1}",
        "+a.b='{not a dict}'",
        "+a.b=x y; $(z) `w`",
        "~actor_rollout_ref.rollout.val_kwargs",
        "actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4",
        "ray_kwargs.timeline_json_file=null",
        "trainer.logger_extra=[console]",
        "e.f[0]=x y",
    ],
)
def test_allowed(override: str) -> None:
    assert _check(override) is None
