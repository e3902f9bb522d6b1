"""GgufModelStore: a protected PVC for GGUF models and the Job that fetches a locked shard set."""

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s.children import after, inherited_dependencies, manifest_args
from components.k8s.metadata import Meta
from components.k8s.network_policies import egress_policy
from components.model_store.inputs import MODELS_MOUNT, GgufModelStoreArgs, ModelVolume
from components.model_store.manifests import (
    HF_TOKEN_KEY,
    content_digest,
    fetch_job,
    fetch_pod_labels,
    fetcher_config_map,
    hub_port,
    model_pvc,
    store_labels,
    store_names,
)
from components.model_store.node_preflight import preflight_network_policy, store_preflight_job
from components.payloads import FETCHER_SOURCE, HTTP_POLICY_SOURCE
from components.payloads.fetcher import ModelFile, fetch_document, lock_digest
from components.validation import (
    ComponentInputError,
    checked_inputs,
    input_problems,
    with_defaults,
)
from components.validation_annotations import with_integers

TYPE_TOKEN = "llm-infra:index:GgufModelStore"


def model_bytes(files: list[ModelFile]) -> int | None:
    """Bytes of the model files, when every size is known (from a lock)."""
    sizes = [file.get("size") for file in files]
    return None if any(size is None for size in sizes) else sum(size or 0 for size in sizes)


def store_model_volume(name: str, args: GgufModelStoreArgs) -> ModelVolume:
    """The volume a store of these inputs makes, known before the store exists (a server that
    must be created first, `upgrade: replace`, mounts it by these names). The inputs get the
    store's own check first (ComponentInputError)."""
    problems = input_problems(with_integers(args, GgufModelStoreArgs), GgufModelStoreArgs)
    if problems:
        raise ComponentInputError("GgufModelStore", name, problems)
    args = with_defaults(args, GgufModelStoreArgs)
    lock, draft_lock = store_locks(args)
    source = FETCHER_SOURCE.read_text() + HTTP_POLICY_SOURCE.read_text()
    names = store_names(name, content_digest(lock, source, draft_lock))
    volume: ModelVolume = {
        "claim_name": names["pvc"],
        "fetcher_config_map": names["config_map"],
        "check_image": args["fetch_image"],
        "run_as_user": args["run_as_user"],
        "model_file": args["files"][0]["name"],
        "model_bytes": model_bytes(args["files"]),
    }
    draft = args.get("draft")
    if draft:
        volume["draft_file"] = draft["files"][0]["name"]
    return volume


def store_locks(args: GgufModelStoreArgs) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The lock documents the fetch Job runs: the model's, and the speculative draft's."""
    lock = fetch_document(args["repo"], args["revision"], args["files"])
    draft = args.get("draft")
    if not draft:
        return lock, None
    return lock, fetch_document(draft["repo"], draft["revision"], draft["files"])


class GgufModelStore(pulumi.ComponentResource):
    """A PVC that holds GGUF models, and a Job that fetches exactly the locked files onto it."""

    claim_name: pulumi.Output[str]
    """Name of the model PVC."""
    fetcher_config_map: pulumi.Output[str]
    """Name of the ConfigMap with the fetcher and the lock (mounted by the server's init check)."""
    lock_digest: pulumi.Output[str]
    """sha256 of the lock the Job fetched; the completion marker is named after it."""
    model_path: pulumi.Output[str]
    """Path of the first shard inside a pod that mounts the volume at /models, once fetched."""

    def __init__(
        self,
        name: str,
        args: GgufModelStoreArgs,
        opts: pulumi.ResourceOptions | None = None,
        *,
        fetch_after: Sequence[pulumi.Resource] = (),
    ) -> None:
        """`fetch_after`: what the fetch Job waits for besides the volume: with `upgrade:
        replace`, the server whose old model the fetch may delete (its Deployment is gone
        first, see LlamaCppVulkanServerArgs.stop_before_model_change)."""
        args = checked_inputs("GgufModelStore", name, args, GgufModelStoreArgs)
        super().__init__(TYPE_TOKEN, name, None, opts)
        namespace = pulumi.Output.from_input(args["namespace"])
        labels = store_labels(name)
        unpinned = [file["name"] for file in args["files"] if not file.get("sha256")]
        # At `up`, where the Job really fetches them: a preview of an unlocked stack says so.
        if unpinned and not pulumi.runtime.is_dry_run():
            pulumi.log.warn(
                f"GgufModelStore {name!r}: {len(unpinned)} of {len(args['files'])} files "
                f"({unpinned[0]!r}, ...) have no sha256 and are fetched unverified: pin them "
                "with a lock file (llm-infra lock; from Python, "
                "infra.component_users.store_files_from_lock)"
            )
        lock, draft_lock = store_locks(args)
        draft_files = list(draft_lock["files"]) if draft_lock is not None else []
        fetcher_source = FETCHER_SOURCE.read_text()
        policy_source = HTTP_POLICY_SOURCE.read_text()
        names = store_names(name, content_digest(lock, fetcher_source + policy_source, draft_lock))
        run_as_user = args["run_as_user"]
        timeout = args["fetch_timeout_seconds"]
        inherited = inherited_dependencies(opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=inherited)

        pvc = pulumi.Output.all(namespace, args["storage_class"]).apply(
            lambda values: model_pvc(
                Meta(names["pvc"], values[0], labels), args["volume_size"], values[1]
            )
        )
        self.pvc = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-pvc",
            **manifest_args(pvc, "metadata", "spec"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=inherited, protect=True),
        )
        config_map = namespace.apply(
            lambda ns: fetcher_config_map(
                Meta(names["config_map"], ns, labels),
                lock,
                fetcher_source,
                policy_source,
                draft_lock,
            )
        )
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-fetcher",
            **manifest_args(config_map, "metadata", "data", "immutable"),
            opts=child,
        )
        self.token_secret: k8s.core.v1.Secret | None = None
        """The HF token as a Secret; None without a token."""
        hf_token = args.get("hf_token")
        if hf_token is not None:
            self.token_secret = k8s.core.v1.Secret(
                f"{name}-hf-token",
                metadata={"name": names["token_secret"], "namespace": namespace, "labels": labels},
                type="Opaque",
                string_data={HF_TOKEN_KEY: pulumi.Output.secret(hf_token)},
                opts=child,
            )
        job = namespace.apply(
            lambda ns: fetch_job(
                Meta(names["job"], ns, labels),
                image=args["fetch_image"],
                claim_name=names["pvc"],
                config_map=names["config_map"],
                node_selector=args["node_selector"],
                retired=args["retired_patterns"],
                parallel=args["parallel_downloads"],
                timeout_seconds=timeout,
                hf_endpoint=args.get("hf_endpoint"),
                allow_token_over_http=args["allow_token_over_http"],
                token_secret=names["token_secret"] if hf_token is not None else None,
                run_as_user=run_as_user,
                upgrade=args["upgrade"],
                draft=draft_lock is not None,
            )
        )
        self.preflight_job: k8s.batch.v1.Job | None = None
        """The node preflight Job, which the fetch waits for; None when not asked for."""
        preflight = args.get("node_preflight")
        if preflight is not None:
            check = namespace.apply(
                lambda ns: store_preflight_job(
                    Meta(name, ns, labels), preflight,
                    files=[*args["files"], *draft_files],
                    retired=args["retired_patterns"], upgrade=args["upgrade"],
                    claim_name=names["pvc"], node_selector=args["node_selector"],
                    run_as_user=run_as_user,
                )
            )  # fmt: skip
            self.preflight_job = k8s.batch.v1.Job(
                f"{name}-preflight",
                **manifest_args(check, "metadata", "spec"),
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[*inherited, self.pvc],
                    custom_timeouts=pulumi.CustomTimeouts(create="20m", update="20m"),
                    delete_before_replace=True,
                ),
            )
            if args["network_policy"]:
                closed = namespace.apply(
                    lambda ns: preflight_network_policy(
                        Meta(f"{name}-preflight-closed", ns, labels)
                    )
                )
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-preflight-closed",
                    **manifest_args(closed, "metadata", "spec"),
                    opts=child,
                )
        preflight_jobs = [self.preflight_job] if self.preflight_job is not None else []
        self.fetch_job = k8s.batch.v1.Job(
            f"{name}-fetch",
            **manifest_args(job, "metadata", "spec"),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[
                    *inherited,
                    self.pvc,
                    self.config_map,
                    *preflight_jobs,
                    *fetch_after,
                ],
                # The Job is awaited until Complete: give the provider the Job's own deadline.
                custom_timeouts=pulumi.CustomTimeouts(
                    create=f"{timeout + 600}s", update=f"{timeout + 600}s"
                ),
                delete_before_replace=True,
            ),
        )
        self.model_volume: ModelVolume = store_model_volume(name, args)
        """The volume, its init check and image, as LlamaCppVulkanServerArgs.model takes them."""
        self.fetch_policy: k8s.networking.v1.NetworkPolicy | None = None
        """The fetch pod's egress policy; None when network_policy is off."""
        if args["network_policy"]:
            policy = namespace.apply(
                lambda ns: egress_policy(
                    Meta(f"{name}-fetch-egress", ns, labels),
                    fetch_pod_labels(name),
                    [hub_port(args.get("hf_endpoint"))],
                )
            )
            self.fetch_policy = k8s.networking.v1.NetworkPolicy(
                f"{name}-fetch-egress", **manifest_args(policy, "metadata", "spec"), opts=child
            )
        self.claim_name = self.pvc.metadata.name
        self.fetcher_config_map = self.config_map.metadata.name
        # The digest and the shard's path are only true of the volume once the Job completed.
        self.lock_digest = after(self.fetch_job, lock_digest(lock))
        self.model_path = after(self.fetch_job, f"{MODELS_MOUNT}/{args['files'][0]['name']}")
        self.register_outputs(
            {
                "claim_name": self.claim_name,
                "fetcher_config_map": self.fetcher_config_map,
                "lock_digest": self.lock_digest,
                "model_path": self.model_path,
            }
        )
