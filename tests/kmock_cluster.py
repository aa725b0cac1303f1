"""A stand-in Kubernetes for tests/system/test_kubernetes_kmock.py: kmock's in-memory API server on 127.0.0.1, driven
by the real `kubectl`, and a stand-in operator that plays the Job controller, mpi-operator and kubelet.

The server is kmock's ``KubernetesEmulator`` (objects kept in memory: create, get, list, watch, merge patch, delete)
with what `kubectl` needs beyond it: OpenAPI v3 documents that declare server-side field validation (so `kubectl
create` sends ``fieldValidation=Strict`` instead of validating against schemas it would download), a server dry run
that stores nothing, label selectors on lists, pod logs, and CRDs that add their kind to discovery. The operator
polls the API over HTTP for Jobs and MPIJobs, creates the pod (a Job's pod, an MPIJob's launcher), runs the pod's
argv on this host in its working directory with its environment, serves what it printed as the pod's log, and patches
the status conditions a real controller writes (Job ``Complete``/``Failed``, MPIJob ``Running``/``Succeeded``/
``Failed``); a job deleted while it runs has its processes killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

VERBS = {"create", "delete", "get", "list", "patch", "update", "watch"}
MPIJOB_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "mpijobs.kubeflow.org"},
    "spec": {
        "group": "kubeflow.org",
        "scope": "Namespaced",
        "names": {"kind": "MPIJob", "listKind": "MPIJobList", "plural": "mpijobs", "singular": "mpijob"},
        "versions": [
            {
                "name": "v2beta1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


def api_class():
    """The emulator class (kmock and aiohttp imported only here: kmock is installed by the test)."""
    import aiohttp.web
    import kmock

    class Api(kmock.KubernetesEmulator):
        def __attrs_post_init__(self):
            super().__attrs_post_init__()
            self.logs: dict[tuple[str, str], str] = {}
            self.add("v1/pods", "Pod", True, {"status", "log"})
            self.add("batch/v1/jobs", "Job", True, {"status"})
            self.add("apiextensions.k8s.io/v1/customresourcedefinitions", "CustomResourceDefinition", False, {"status"})

        def add(self, key: str, kind: str, namespaced: bool, subresources: set[str]) -> None:
            self.resources[key] = kmock.ResourceInfo(
                kind=kind, namespaced=namespaced, singular=kind.lower(), verbs=VERBS, subresources=subresources
            )

        def openapi(self, path: str) -> dict:
            groups: dict[str, list] = {}
            for res in self.resources:
                groups.setdefault(f"apis/{res.group}/{res.version}" if res.group else "api/v1", []).append(res)
            if path == "/openapi/v3":
                return {"paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}"} for gv in groups}}
            gv, paths = path.removeprefix("/openapi/v3/"), {}
            for res in groups.get(gv, []):
                info = self.resources[res]
                gvk = {"group": res.group, "version": res.version, "kind": info.kind}
                field_validation = {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
                op = {"x-kubernetes-group-version-kind": gvk, "parameters": [field_validation], "responses": {}}
                ns = "namespaces/{namespace}/" if info.namespaced else ""
                paths[f"/{gv}/{ns}{res.plural}/{{name}}"] = {"patch": op}
            return {"openapi": "3.0.0", "info": {"title": "kmock", "version": "v1"}, "paths": paths}

        async def _handle(self, request):
            namespace = re.fullmatch(r"/api/v1/namespaces/([^/]+)", request.url.path)
            if namespace and request.method.value.upper() == "GET":  # every namespace exists (as the site's does)
                meta = {"name": namespace.group(1)}
                return aiohttp.web.json_response({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
            if request.url.path.startswith("/openapi/v3"):
                return aiohttp.web.json_response(self.openapi(request.url.path))
            if request.subresource == "log":
                lines = self.logs.get((request.namespace, request.name), "").splitlines(keepends=True)
                tail = int(request.params.get("tailLines") or len(lines))
                return aiohttp.web.Response(text="".join(lines[len(lines) - tail :] if tail else []))
            if request.name and request.action in (kmock.action.FETCH, kmock.action.UPDATE, kmock.action.DELETE):
                key = (request.resource, request.namespace, request.name)
                if key not in self.objects or self.objects[key].deleted:  # the API server's 404 (not kmock's)
                    res = f"{request.resource.plural}.{request.resource.group}".rstrip(".")
                    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                              "message": f'{res} "{request.name}" not found', "code": 404}  # fmt: skip
                    return aiohttp.web.json_response(status, status=404)
            if request.params.get("dryRun") and request.action == kmock.action.CREATE:
                return aiohttp.web.json_response(request.data, status=201)  # checked, not stored
            response = await super()._handle(request)
            if request.action == kmock.action.CREATE and request.resource.plural == "customresourcedefinitions":
                spec = request.data["spec"]
                for v in spec["versions"]:
                    key = f"{spec['group']}/{v['name']}/{spec['names']['plural']}"
                    self.add(key, spec["names"]["kind"], spec["scope"] == "Namespaced", {"status"})
            return response

        async def _serve_list(self, request):
            out = await super()._serve_list(request)
            kind = self.resources[request.resource].kind if request.resource in self.resources else "Object"
            pairs = [p.split("=", 1) for p in (request.params.get("labelSelector") or "").split(",") if "=" in p]
            items = [
                o for o in out["items"] if all(o.get("metadata", {}).get("labels", {}).get(k) == v for k, v in pairs)
            ]
            gv = f"{request.resource.group}/{request.resource.version}".lstrip("/")
            return {"apiVersion": gv, "kind": f"{kind}List", "metadata": {"resourceVersion": "1"}, "items": items}

    return Api


class ApiServer:
    """kmock on 127.0.0.1 (a free port) in a thread of its own; ``url``, ``api`` (the emulator), ``stop()``."""

    def __init__(self):
        import kmock

        self._loop = asyncio.new_event_loop()
        self._ready, self._done = threading.Event(), None
        self.url, self.api = None, None

        async def serve():
            self._done = asyncio.Event()
            async with api_class()() as api, kmock.Server(api, host="127.0.0.1") as server:
                self.api, self.url = api, str(server.url).rstrip("/")
                self._ready.set()
                await self._done.wait()

        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(serve(),), daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("kmock did not start within 30 s")

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._done.set)
        self._thread.join(10)


def kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": url}}],
                "users": [{"name": "test", "user": {}}],
                "contexts": [
                    {"name": "kmock", "context": {"cluster": "kmock", "user": "test", "namespace": "default"}}
                ],
                "current-context": "kmock",
            }
        )
    )
    return path


class Operator:
    """Runs each Job's pod and each MPIJob's launcher pod on this host; see the module docstring."""

    KINDS = {"Job": "/apis/batch/v1", "MPIJob": "/apis/kubeflow.org/v2beta1"}

    def __init__(self, server: ApiServer, interval: float = 0.3):
        self.server, self.interval = server, interval
        self.running: dict[tuple, tuple] = {}  # (kind, ns, name) -> (process, output file, pod)
        self.finished: dict[tuple, int] = {}  # (kind, ns, name) -> exit status
        self.logs: dict[tuple, str] = {}  # (kind, ns, name) -> what the pod printed
        self.killed: set[tuple] = set()
        self.errors: list[str] = []  # what went wrong in the operator's loop (the tests assert there is none)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        ctype = "application/merge-patch+json" if method == "PATCH" else "application/json"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server.url + path, data=data, method=method, headers={"Content-Type": ctype})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"{}")

    def _items(self, kind: str) -> list[dict]:
        plural = kind.lower() + "s"
        try:
            return self._call("GET", f"{self.KINDS[kind]}/{plural}")["items"]
        except urllib.error.HTTPError as exc:  # the MPIJob resource before its CRD is registered
            if exc.code == 404:
                return []
            raise

    def _start(self, kind: str, obj: dict) -> None:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        base = f"{self.KINDS[kind]}/namespaces/{ns}/{kind.lower()}s/{name}"
        if kind == "Job":
            template, pod = obj["spec"]["template"], f"{name}-pod"
            selector = {"batch.kubernetes.io/job-name": name}
            self._call("PATCH", base, {"spec": {"selector": {"matchLabels": selector}}})
            self._call("PATCH", base + "/status", {"status": {"active": 1}})
        else:
            template, pod = obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"], f"{name}-launcher"
            selector = {"training.kubeflow.org/job-name": name, "training.kubeflow.org/job-role": "launcher"}
            running = [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]
            self._call("PATCH", base + "/status", {"status": {"conditions": running}})
        labels = {**template["metadata"].get("labels", {}), **selector}
        meta = {"name": pod, "namespace": ns, "labels": labels}
        pod_obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}
        self._call("POST", f"/api/v1/namespaces/{ns}/pods", pod_obj)
        container = template["spec"]["containers"][0]
        env = {**os.environ, **{e["name"]: e["value"] for e in container.get("env", [])}}
        out = tempfile.TemporaryFile()
        proc = subprocess.Popen(
            [*container["command"], *container.get("args", [])],
            cwd=container["workingDir"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.running[(kind, ns, name)] = (proc, out, pod)

    def _finish(self, key: tuple, rc: int) -> None:
        kind, ns, name = key
        proc, out, pod = self.running.pop(key)
        out.seek(0)
        self.logs[key] = self.server.api.logs[(ns, pod)] = out.read().decode(errors="replace")
        out.close()
        if kind == "Job":
            cond = "Complete" if rc == 0 else "Failed"
            status = {"active": 0, "succeeded" if rc == 0 else "failed": 1}
        else:
            cond, status = ("Succeeded" if rc == 0 else "Failed"), {}
        status["conditions"] = [{"type": cond, "status": "True", "reason": f"exit {rc}"}]
        self._call("PATCH", f"{self.KINDS[kind]}/namespaces/{ns}/{kind.lower()}s/{name}/status", {"status": status})
        self.finished[key] = rc

    def _kill(self, key: tuple) -> None:
        proc, out, _ = self.running.pop(key)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        out.close()
        self.killed.add(key)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                present = set()
                for kind in self.KINDS:
                    for obj in self._items(kind):
                        key = (kind, obj["metadata"]["namespace"], obj["metadata"]["name"])
                        present.add(key)
                        if key not in self.running and key not in self.finished:
                            self._start(kind, obj)
                for key in list(self.running):
                    if key not in present:  # deleted (cancelled): its pods go with it
                        self._kill(key)
                    elif self.running[key][0].poll() is not None:
                        self._finish(key, self.running[key][0].returncode)
            except Exception as exc:  # noqa: BLE001 - kept for the tests to show (a stopping server: no harm)
                if not self._stop.is_set():
                    self.errors.append(f"{type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for key in list(self.running):
            self._kill(key)
