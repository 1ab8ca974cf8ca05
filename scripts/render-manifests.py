#!/usr/bin/env python3
"""Renders deploy/kubernetes the way `kubectl apply -k` would, and checks every object against the
Kubernetes API's own schema (the pinned kubernetes-validate package, strict: an unknown field is an
error), with no cluster and no kustomize binary.

    scripts/render-manifests.py [--validate] [--kubernetes-version 1.31.0] DIR...

Each DIR holds a kustomization.yaml. The rendered objects are printed as one YAML stream per DIR;
with --validate each is also validated, and the exit status is 1 if any is not valid.

It renders the part of kustomize the manifests use, and refuses anything else rather than
rendering it wrongly: `resources` (files and directories with a kustomization), `namespace`,
`labels` (pairs, on the objects' own metadata), `images` (newName, newTag), `configMapGenerator`
and `secretGenerator` (literals and env files; behaviour create or merge), and `patches` that are
JSON patches (add, replace, remove) with a kind and name target. A generated object's name keeps no
content hash (kustomize appends one and rewrites references to it; the schema does not depend on
it). An env file that is kept out of git (the development overlay's secrets.env) is read from its
committed `.example` when it is absent.
"""
import argparse
import base64
import copy
import os
import sys

import yaml

KNOWN_KEYS = {
    "apiVersion", "kind", "resources", "namespace", "labels", "images", "configMapGenerator",
    "secretGenerator", "patches",
}


class RenderError(Exception):
    pass


def load_kustomization(directory):
    path = os.path.join(directory, "kustomization.yaml")
    if not os.path.isfile(path):
        raise RenderError(f"{directory}: no kustomization.yaml")
    with open(path) as handle:
        kustomization = yaml.safe_load(handle) or {}
    unknown = set(kustomization) - KNOWN_KEYS
    if unknown:
        raise RenderError(f"{path}: fields this renderer does not know: {', '.join(sorted(unknown))}")
    return kustomization


def env_pairs(directory, name):
    path = os.path.join(directory, name)
    if not os.path.isfile(path) and os.path.isfile(path + ".example"):
        path += ".example"
    if not os.path.isfile(path):
        raise RenderError(f"{directory}: the env file {name} is missing")
    pairs = {}
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, separator, value = line.partition("=")
            if not separator:
                raise RenderError(f"{path}: a line that is not KEY=VALUE")
            pairs[key.strip()] = value
    return pairs


def generator_data(directory, generator):
    data = {}
    for name in generator.get("envs", []):
        data.update(env_pairs(directory, name))
    for literal in generator.get("literals", []):
        key, separator, value = literal.partition("=")
        if not separator:
            raise RenderError(f"{directory}: a literal that is not KEY=VALUE: {literal}")
        data[key] = value
    unknown = set(generator) - {"name", "envs", "literals", "behavior"}
    if unknown:
        raise RenderError(f"{directory}: generator fields this renderer does not know: {', '.join(sorted(unknown))}")
    return data


def find(objects, kind, name):
    matches = [o for o in objects if o.get("kind") == kind and o.get("metadata", {}).get("name") == name]
    return matches[0] if matches else None


def generate(directory, kustomization, objects):
    for kind, key in (("ConfigMap", "configMapGenerator"), ("Secret", "secretGenerator")):
        for generator in kustomization.get(key, []):
            data = generator_data(directory, generator)
            if kind == "Secret":
                data = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
            behavior = generator.get("behavior", "create")
            existing = find(objects, kind, generator["name"])
            if behavior == "merge":
                if existing is None:
                    raise RenderError(f"{directory}: {kind} {generator['name']} to merge into does not exist")
                existing.setdefault("data", {}).update(data)
            elif behavior == "create":
                if existing is not None:
                    raise RenderError(f"{directory}: {kind} {generator['name']} exists already")
                made = {"apiVersion": "v1", "kind": kind, "metadata": {"name": generator["name"]}, "data": data}
                if kind == "Secret":
                    made["type"] = "Opaque"
                objects.append(made)
            else:
                raise RenderError(f"{directory}: generator behaviour {behavior} is not rendered here")


def pointer(path):
    if not path.startswith("/"):
        raise RenderError(f"a JSON patch path that is not a pointer: {path}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def json_patch(target, operations):
    for operation in operations:
        op, parts = operation.get("op"), pointer(operation.get("path", ""))
        parent = target
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if op == "add":
                parent.insert(index, copy.deepcopy(operation["value"]))
            elif op == "replace":
                parent[index] = copy.deepcopy(operation["value"])
            elif op == "remove":
                del parent[index]
            else:
                raise RenderError(f"JSON patch operation {op} is not rendered here")
        else:
            if op in ("replace", "remove") and last not in parent:
                raise RenderError(f"JSON patch {op} of {operation['path']}, which does not exist")
            if op in ("add", "replace"):
                parent[last] = copy.deepcopy(operation["value"])
            elif op == "remove":
                del parent[last]
            else:
                raise RenderError(f"JSON patch operation {op} is not rendered here")


def pod_specs(obj):
    spec = obj.get("spec", {})
    if obj.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"):
        yield spec.get("template", {}).get("spec", {})
    elif obj.get("kind") == "CronJob":
        yield spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {})
    elif obj.get("kind") == "Pod":
        yield spec


def render(directory):
    directory = os.path.normpath(directory)
    kustomization = load_kustomization(directory)
    objects = []
    for resource in kustomization.get("resources", []):
        path = os.path.join(directory, resource)
        if os.path.isdir(path):
            objects.extend(render(path))
        else:
            with open(path) as handle:
                objects.extend(o for o in yaml.safe_load_all(handle) if o)
    generate(directory, kustomization, objects)
    for patch in kustomization.get("patches", []):
        target = patch.get("target", {})
        if set(target) - {"kind", "name"} or "patch" not in patch or set(patch) - {"target", "patch"}:
            raise RenderError(f"{directory}: only JSON patches with a kind and name target are rendered here")
        operations = yaml.safe_load(patch["patch"])
        if not isinstance(operations, list):
            raise RenderError(f"{directory}: a patch that is not a JSON patch (a list of operations)")
        matched = [o for o in objects if o.get("kind") == target.get("kind") and o["metadata"].get("name") == target.get("name")]
        if not matched:
            raise RenderError(f"{directory}: a patch's target {target} matches nothing")
        for obj in matched:
            json_patch(obj, operations)
    for image in kustomization.get("images", []):
        for obj in objects:
            for spec in pod_specs(obj):
                for container in spec.get("containers", []) + spec.get("initContainers", []):
                    name, _, tag = container.get("image", "").partition(":")
                    if name == image["name"]:
                        container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag or 'latest')}"
    for label in kustomization.get("labels", []):
        if label.get("includeSelectors") or label.get("includeTemplates"):
            raise RenderError(f"{directory}: labels on selectors or templates are not rendered here")
        for obj in objects:
            obj.setdefault("metadata", {}).setdefault("labels", {}).update(label.get("pairs", {}))
    if "namespace" in kustomization:
        for obj in objects:
            obj["metadata"]["namespace"] = kustomization["namespace"]
    return objects


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validate", action="store_true")
    parser.add_argument("--kubernetes-version", default="1.31.0")
    parser.add_argument("directories", nargs="+")
    arguments = parser.parse_args()
    failures = 0
    for directory in arguments.directories:
        try:
            objects = render(directory)
        except (RenderError, KeyError, IndexError, ValueError, OSError, yaml.YAMLError) as error:
            print(f"render: {directory}: {error}", file=sys.stderr)
            failures += 1
            continue
        print(f"# {directory}: {len(objects)} objects")
        print(yaml.safe_dump_all(objects, sort_keys=False), end="")
        if arguments.validate:
            import kubernetes_validate
            for obj in objects:
                what = f"{directory}: {obj.get('kind')} {obj.get('metadata', {}).get('name')}"
                try:
                    kubernetes_validate.validate(obj, arguments.kubernetes_version, strict=True)
                except kubernetes_validate.ValidationError as error:
                    print(f"invalid: {what}: {'/'.join(str(p) for p in error.path)}: {error.message}", file=sys.stderr)
                    failures += 1
                except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as error:
                    print(f"invalid: {what}: {error}", file=sys.stderr)
                    failures += 1
            print(f"# {directory}: {len(objects)} objects checked against Kubernetes {arguments.kubernetes_version}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
