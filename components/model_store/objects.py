"""Pure builder of GgufModelStore's objects: which ones a store of these inputs has, each with
its manifest and options, in the order they are created.

Each manifest is made from the known namespace (and storage class), which may reach the store
as outputs; the PVC, ConfigMap and Jobs themselves are built in `manifests.py` and
`node_preflight.py`.
"""

from dataclasses import dataclass
from functools import partial
from typing import Any

from components.k8s.metadata import Meta, object_head
from components.k8s.network_policies import egress_policy
from components.k8s.objects import KubeObject
from components.model_store.inputs import GgufModelStoreArgs, ModelVolume, NodePreflight
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


@dataclass(frozen=True)
class Store:
    """What every object of one store is made from: its inputs, the locks and the names."""

    name: str
    args: GgufModelStoreArgs
    labels: dict[str, str]
    lock: dict[str, Any]
    draft_lock: dict[str, Any] | None
    lock_digest: str
    """The model lock's sha256: the fetch Job's completion marker is named after it."""
    names: dict[str, str]
    """Object names, by `store_names`: the content digest in the ConfigMap's and the Job's."""
    fetcher_source: str
    policy_source: str

    def meta(self, object_name: str, namespace: str) -> Meta:
        """The head of one of its objects."""
        return Meta(object_name, namespace, self.labels)


def store_of(name: str, args: GgufModelStoreArgs) -> Store:
    """The store of these validated inputs: the locks its Job runs (the model's, and the
    speculative draft's), and the names their content gives its objects."""
    lock = fetch_document(args["repo"], args["revision"], args["files"])
    draft = args.get("draft")
    draft_lock = fetch_document(draft["repo"], draft["revision"], draft["files"]) if draft else None
    digests = lock_digest(lock), None if draft_lock is None else lock_digest(draft_lock)
    fetcher_source = FETCHER_SOURCE.read_text()
    policy_source = HTTP_POLICY_SOURCE.read_text()
    digest = content_digest(digests[0], fetcher_source + policy_source, digests[1])
    names = store_names(name, digest)
    return Store(
        name,
        args,
        store_labels(name),
        lock,
        draft_lock,
        digests[0],
        names,
        fetcher_source,
        policy_source,
    )


def model_bytes(files: list[ModelFile]) -> int | None:
    """Bytes of the model files, when every size is known (from a lock)."""
    sizes = [file.get("size") for file in files]
    return None if any(size is None for size in sizes) else sum(size or 0 for size in sizes)


def model_volume(store: Store) -> ModelVolume:
    """The volume the store makes, its init check and image, as a server mounts it."""
    args = store.args
    volume: ModelVolume = {
        "claim_name": store.names["pvc"],
        "fetcher_config_map": store.names["config_map"],
        "check_image": args["fetch_image"],
        "run_as_user": args["run_as_user"],
        "model_file": args["files"][0]["name"],
        "model_bytes": model_bytes(args["files"]),
    }
    draft = args.get("draft")
    if draft:
        volume["draft_file"] = draft["files"][0]["name"]
    return volume


def store_objects(store: Store) -> list[KubeObject]:
    """Every object of the store, in the order they are created."""
    name, args = store.name, store.args
    pvc, fetcher = f"{name}-pvc", f"{name}-fetcher"
    objects = [
        KubeObject(
            pvc,
            "PersistentVolumeClaim",
            partial(_pvc, store),
            reads=("namespace", "storage_class"),
            protect=True,
        ),
        KubeObject(
            fetcher,
            "ConfigMap",
            partial(_fetcher_config_map, store),
            fields=("metadata", "data", "immutable"),
        ),
    ]
    if args.get("hf_token") is not None:
        objects.append(
            KubeObject(
                f"{name}-hf-token",
                "Secret",
                partial(_token_secret, store),
                fields=("metadata",),
                constants=(("type", "Opaque"),),
                secret_data=((HF_TOKEN_KEY, "hf_token"),),
            )
        )
    preflight = args.get("node_preflight")
    checked: tuple[str, ...] = ()
    if preflight is not None:
        checked = (f"{name}-preflight",)
        objects.append(
            KubeObject(
                checked[0],
                "Job",
                partial(_preflight_job, store, preflight),
                after=(pvc,),
                timeout="20m",
                delete_before_replace=True,
            )
        )
        if args["network_policy"]:
            closed = partial(_preflight_policy, store)
            objects.append(KubeObject(f"{name}-preflight-closed", "NetworkPolicy", closed))
    # The Job is awaited until Complete: give the provider the Job's own deadline.
    timeout = f"{args['fetch_timeout_seconds'] + 600}s"
    objects.append(
        KubeObject(
            f"{name}-fetch",
            "Job",
            partial(_fetch_job, store),
            after=(pvc, fetcher, *checked),
            timeout=timeout,
            delete_before_replace=True,
        )
    )
    if args["network_policy"]:
        egress = partial(_fetch_policy, store)
        objects.append(KubeObject(f"{name}-fetch-egress", "NetworkPolicy", egress))
    return objects


def _pvc(store: Store, namespace: str, storage_class: str) -> dict[str, Any]:
    meta = store.meta(store.names["pvc"], namespace)
    return model_pvc(meta, store.args["volume_size"], storage_class)


def _fetcher_config_map(store: Store, namespace: str) -> dict[str, Any]:
    meta = store.meta(store.names["config_map"], namespace)
    return fetcher_config_map(
        meta, store.lock, store.fetcher_source, store.policy_source, store.draft_lock
    )


def _token_secret(store: Store, namespace: str) -> dict[str, Any]:
    """The HF token's Secret, less what the resource is given as it is: its type and data."""
    return object_head("v1", "Secret", store.meta(store.names["token_secret"], namespace))


def _preflight_job(store: Store, preflight: NodePreflight, namespace: str) -> dict[str, Any]:
    args = store.args
    draft_files = list(store.draft_lock["files"]) if store.draft_lock is not None else []
    return store_preflight_job(
        store.meta(store.name, namespace),
        preflight,
        files=[*args["files"], *draft_files],
        retired=args["retired_patterns"],
        upgrade=args["upgrade"],
        claim_name=store.names["pvc"],
        node_selector=args["node_selector"],
        run_as_user=args["run_as_user"],
    )


def _preflight_policy(store: Store, namespace: str) -> dict[str, Any]:
    return preflight_network_policy(store.meta(f"{store.name}-preflight-closed", namespace))


def _fetch_job(store: Store, namespace: str) -> dict[str, Any]:
    args, names = store.args, store.names
    return fetch_job(
        store.meta(names["job"], namespace),
        image=args["fetch_image"],
        claim_name=names["pvc"],
        config_map=names["config_map"],
        node_selector=args["node_selector"],
        retired=args["retired_patterns"],
        parallel=args["parallel_downloads"],
        timeout_seconds=args["fetch_timeout_seconds"],
        hf_endpoint=args.get("hf_endpoint"),
        allow_token_over_http=args["allow_token_over_http"],
        token_secret=names["token_secret"] if args.get("hf_token") is not None else None,
        run_as_user=args["run_as_user"],
        upgrade=args["upgrade"],
        draft=store.draft_lock is not None,
    )


def _fetch_policy(store: Store, namespace: str) -> dict[str, Any]:
    meta = store.meta(f"{store.name}-fetch-egress", namespace)
    return egress_policy(
        meta, fetch_pod_labels(store.name), [hub_port(store.args.get("hf_endpoint"))]
    )
