"""Rendered objects checked against the official schemas (``ddpnet k8s --validate``, and the
tests): each object is loaded into its model and serialized back; what comes back must equal
what was rendered. A misspelt or misplaced key is dropped by the model, a wrong type is
converted, a missing required field is refused: each shows as a difference.

- Service and a JobSet's Job template: the ``kubernetes`` client's models (V1Service,
  V1JobTemplateSpec);
- PyTorchJob: the Kubeflow training SDK's (KubeflowOrgV1PyTorchJob, with the kubernetes pod
  template inside);
- JobSet: no Python SDK is published, so its skeleton is checked against the v1alpha2
  openAPIV3Schema of JobSet's CRD, shipped next to this file (``jobset_v1alpha2_schema.json``,
  source and commit inside), and its Job template with the kubernetes models.

The libraries are the ``k8s`` extra (``pip install 'ddpnet[k8s]'``), imported on first use.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddpnet.errors import RequirementError

SCHEMA = Path(__file__).with_name("jobset_v1alpha2_schema.json")
#: the one JobSet version the shipped schema is (and ``render`` writes)
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
#: model class names by (apiVersion, kind)
MODELS = {("v1", "Service"): "V1Service",
          ("kubeflow.org/v1", "PyTorchJob"): "KubeflowOrgV1PyTorchJob"}
_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict, "array": list, "string": str, "boolean": bool, "integer": int}


def _client() -> Any:
    """The Kubeflow SDK's ApiClient: it resolves its own models and every kubernetes one."""
    try:
        from kubeflow.training.api_client import ApiClient
    except ImportError as exc:
        raise RequirementError(f"--validate needs the Kubernetes models ({exc.name} is missing)",
                               "pip install 'ddpnet[k8s]' (kubernetes, kubeflow-training)"
                               ) from None
    return ApiClient()


def roundtrip(data: dict[str, Any], model: str, client: Any | None = None) -> list[str]:
    """Differences between ``data`` and ``data`` loaded into ``model`` and serialized back."""
    api = client or _client()
    try:
        loaded = api._ApiClient__deserialize(data, model)
    except (ValueError, TypeError) as exc:
        return [f"{model}: {exc}"]
    return differences(data, api.sanitize_for_serialization(loaded), model)


def differences(want: Any, got: Any, path: str) -> list[str]:
    """Where ``got`` differs from ``want`` (the first difference under each key)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out: list[str] = []
        for key in sorted(set(want) | set(got)):
            if key not in got:
                out.append(f"{path}.{key}: dropped by the model (not a field there)")
            elif key not in want:
                out.append(f"{path}.{key}: added by the model ({got[key]!r})")
            else:
                out += differences(want[key], got[key], f"{path}.{key}")
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (w, g) in enumerate(zip(want, got, strict=True)) for d in
                differences(w, g, f"{path}[{i}]")]
    if type(want) is not type(got) or want != got:
        return [f"{path}: rendered {want!r}, the model has {got!r}"]
    return []


def schema_problems(data: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """``data`` against a CRD's structural schema: types, enums, minimums, required and
    unknown fields (the API server prunes those silently)."""
    expected = schema.get("type")
    if expected in _TYPES and (not isinstance(data, _TYPES[expected])
                               or (expected == "integer" and isinstance(data, bool))):
        return [f"{path}: {data!r} is not of type {expected}"]
    if "enum" in schema and data not in schema["enum"]:
        return [f"{path}: {data!r} is not one of {schema['enum']}"]
    if "minimum" in schema and isinstance(data, int) and data < schema["minimum"]:
        return [f"{path}: {data} is below {schema['minimum']}"]
    if isinstance(data, list):
        items = schema.get("items", {})
        return [p for i, v in enumerate(data) for p in schema_problems(v, items, f"{path}[{i}]")]
    if not isinstance(data, dict) or "properties" not in schema:
        return []
    props = schema["properties"]
    out = [f"{path}.{k}: required" for k in schema.get("required", ()) if k not in data]
    for key, value in data.items():
        if key not in props:
            out.append(f"{path}.{key}: not a field of the schema")
        else:
            out += schema_problems(value, props[key], f"{path}.{key}")
    return out


def jobset_problems(data: dict[str, Any], client: Any | None = None) -> list[str]:
    """A JobSet: the CRD schema for its skeleton, the kubernetes models for each Job."""
    crd = json.loads(SCHEMA.read_text())
    out = schema_problems(data, crd["openAPIV3Schema"])
    for i, rjob in enumerate(data.get("spec", {}).get("replicatedJobs", [])):
        out += [p.replace("V1JobTemplateSpec", f"$.spec.replicatedJobs[{i}].template")
                for p in roundtrip(rjob.get("template", {}), "V1JobTemplateSpec", client)]
    return out


def problems(objects: tuple[dict[str, Any], ...]) -> list[str]:
    """Every difference or schema problem of the rendered objects (empty: all valid)."""
    client = _client()
    out: list[str] = []
    for obj in objects:
        key = (obj.get("apiVersion"), obj.get("kind"))
        if key == (JOBSET_API, "JobSet"):
            out += jobset_problems(obj, client)
        elif key in MODELS:
            out += roundtrip(obj, MODELS[key], client)
        else:
            out.append(f"{key[1]} {key[0]}: no model to check it against")
    return out
