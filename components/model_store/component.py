"""GgufModelStore: a protected PVC for GGUF models and the Job that fetches a locked shard set."""

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.k8s.children import after, inherited_dependencies, kube_resources
from components.model_store.inputs import MODELS_MOUNT, GgufModelStoreArgs, ModelVolume
from components.model_store.objects import model_volume, store_objects, store_of
from components.validation import (
    ComponentInputError,
    checked_inputs,
    input_problems,
    with_defaults,
)
from components.validation_annotations import with_integers

TYPE_TOKEN = "llm-infra:index:GgufModelStore"


def store_model_volume(name: str, args: GgufModelStoreArgs) -> ModelVolume:
    """The volume a store of these inputs makes, known before the store exists (a server that
    must be created first, `upgrade: replace`, mounts it by these names). The inputs get the
    store's own check first (ComponentInputError)."""
    problems = input_problems(with_integers(args, GgufModelStoreArgs), GgufModelStoreArgs)
    if problems:
        raise ComponentInputError("GgufModelStore", name, problems)
    return model_volume(store_of(name, with_defaults(args, GgufModelStoreArgs)))


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
        unpinned = [file["name"] for file in args["files"] if not file.get("sha256")]
        # At `up`, where the Job really fetches them: a preview of an unlocked stack says so.
        if unpinned and not pulumi.runtime.is_dry_run():
            pulumi.log.warn(
                f"GgufModelStore {name!r}: {len(unpinned)} of {len(args['files'])} files "
                f"({unpinned[0]!r}, ...) have no sha256 and are fetched unverified: pin them "
                "with a lock file (llm-infra lock; from Python, "
                "infra.component_users.store_files_from_lock)"
            )
        store = store_of(name, args)
        inputs = {key: args.get(key) for key in ("namespace", "storage_class", "hf_token")}
        made = kube_resources(
            store_objects(store),
            inputs,
            self,
            inherited_dependencies(opts),
            waits_for={f"{name}-fetch": fetch_after},
        )
        self.pvc: k8s.core.v1.PersistentVolumeClaim = made[f"{name}-pvc"]
        """The model volume, protected."""
        self.config_map: k8s.core.v1.ConfigMap = made[f"{name}-fetcher"]
        """The fetcher and the lock, named after their content."""
        self.token_secret: k8s.core.v1.Secret | None = made.get(f"{name}-hf-token")
        """The HF token as a Secret; None without a token."""
        self.preflight_job: k8s.batch.v1.Job | None = made.get(f"{name}-preflight")
        """The node preflight Job, which the fetch waits for; None when not asked for."""
        self.fetch_job: k8s.batch.v1.Job = made[f"{name}-fetch"]
        """The Job that fetches the locked files onto the volume."""
        self.fetch_policy: k8s.networking.v1.NetworkPolicy | None = made.get(f"{name}-fetch-egress")
        """The fetch pod's egress policy; None when network_policy is off."""
        self.model_volume: ModelVolume = model_volume(store)
        """The volume, its init check and image, as LlamaCppVulkanServerArgs.model takes them."""
        self.claim_name = self.pvc.metadata.name
        self.fetcher_config_map = self.config_map.metadata.name
        # The digest and the shard's path are only true of the volume once the Job completed.
        self.lock_digest = after(self.fetch_job, store.lock_digest)
        self.model_path = after(self.fetch_job, f"{MODELS_MOUNT}/{args['files'][0]['name']}")
        self.register_outputs(
            {
                "claim_name": self.claim_name,
                "fetcher_config_map": self.fetcher_config_map,
                "lock_digest": self.lock_digest,
                "model_path": self.model_path,
            }
        )
