"""Rendering of scene meshes: RGB, metric z-depth and instance ids from a camera pose.

Two interchangeable renderers share one interface: ``ModernGLRenderer`` rasterises all
three outputs in one pass (OpenGL 3.3 through a headless EGL context: Mesa llvmpipe on a
CPU, the GPU's driver when there is one); ``EmbreeRenderer`` casts one ray per pixel with
Embree. They agree on depth to well under a millimetre and on labels except at silhouette
pixels, and the ray caster is the fallback where no EGL context can be made.

Conventions: pixel (row v, column u) looks through the pixel centre; depth is the distance
along the optical axis in metres, 0 where the ray hits nothing; instance 0 means no object.
Shading (both renderers): colour * (0.45 + 0.35 max(0, n.L) + 0.2 |n.view|), L fixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ivln_ce.geometry import camera_rays, focal_lengths, rotation_y
from ivln_ce.scenes.mesh import TriangleMesh

LIGHT_DIR = np.array([0.3, 1.0, 0.5]) / np.linalg.norm([0.3, 1.0, 0.5])
NEAR, FAR = 0.02, 100.0


@dataclass(frozen=True)
class CameraSpec:
    width: int
    height: int
    hfov: float  # radians


@dataclass
class RenderOutput:
    rgb: np.ndarray | None = None  # (H, W, 3) uint8
    depth: np.ndarray | None = None  # (H, W) float32 metres, 0 = no hit
    instance: np.ndarray | None = None  # (H, W) int32, 0 = no object


class Renderer(Protocol):
    name: str

    def render(self, eye: np.ndarray, heading: float, camera: CameraSpec, rgb: bool = True, depth: bool = True, instance: bool = True) -> RenderOutput: ...

    def close(self) -> None: ...


def _shade(colors: np.ndarray, normals: np.ndarray, view: np.ndarray) -> np.ndarray:
    lam = np.clip(normals @ LIGHT_DIR, 0.0, None)
    head = np.abs(np.sum(normals * view, axis=-1))
    factor = 0.45 + 0.35 * lam + 0.2 * head
    return np.clip(colors * factor[..., None], 0, 255)


# --------------------------------------------------------------------------- ray casting


class EmbreeRenderer:
    """One Embree ray per pixel centre."""

    name = "embree"

    def __init__(self, mesh: TriangleMesh):
        from embreex import rtcore_scene as rtcs
        from embreex.mesh_construction import TriangleMesh as EmbreeMesh

        self.mesh = mesh
        self._scene = rtcs.EmbreeScene()
        EmbreeMesh(self._scene, mesh.positions.astype(np.float32), mesh.faces.astype(np.int32))
        self._face_color = mesh.colors[mesh.faces[:, 0], :3].astype(np.float64)
        self._face_normal = mesh.normals[mesh.faces[:, 0]].astype(np.float64)
        self._rays: dict[tuple, np.ndarray] = {}

    def cast(self, origins: np.ndarray, directions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ray parameter of the first hit or inf, face index or -1) for each ray."""
        res = self._scene.run(np.ascontiguousarray(origins, np.float32), np.ascontiguousarray(directions, np.float32), output=1)
        prim = res["primID"].astype(np.int64)
        t = np.where(prim >= 0, res["tfar"].astype(np.float64), np.inf)
        return t, prim

    def render(self, eye, heading, camera: CameraSpec, rgb=True, depth=True, instance=True) -> RenderOutput:
        key = (camera.width, camera.height, camera.hfov, round(heading, 12))
        dirs = self._rays.get(key)
        if dirs is None:
            if len(self._rays) > 64:
                self._rays.clear()
            dirs = camera_rays(camera.width, camera.height, camera.hfov, heading).reshape(-1, 3)
            self._rays[key] = dirs
        origins = np.broadcast_to(np.asarray(eye, np.float64), dirs.shape)
        t, prim = self.cast(origins, dirs)
        hit = prim >= 0
        out = RenderOutput()
        shape = (camera.height, camera.width)
        if depth:
            out.depth = np.where(hit, t, 0.0).astype(np.float32).reshape(shape)
        if instance:
            inst = np.zeros(len(prim), dtype=np.int32)
            inst[hit] = self.mesh.face_instance[prim[hit]]
            out.instance = inst.reshape(shape)
        if rgb:
            color = np.zeros((len(prim), 3))
            view = -dirs[hit] / np.linalg.norm(dirs[hit], axis=1, keepdims=True)
            color[hit] = _shade(self._face_color[prim[hit]], self._face_normal[prim[hit]], view)
            out.rgb = np.round(color).astype(np.uint8).reshape(*shape, 3)
        return out

    def close(self) -> None:
        self._scene = None


# --------------------------------------------------------------------------- rasterising

_VERTEX = """
#version 330
uniform mat4 u_view;
uniform mat4 u_proj;
in vec3 in_pos;
in vec3 in_normal;
in vec4 in_color;
in uint in_inst;
out vec3 v_normal;
out vec3 v_color;
out vec3 v_world;
out float v_z;
flat out uint v_inst;
void main() {
    vec4 cam = u_view * vec4(in_pos, 1.0);
    gl_Position = u_proj * cam;
    v_z = -cam.z;
    v_normal = in_normal;
    v_color = in_color.rgb * 255.0;
    v_world = in_pos;
    v_inst = in_inst;
}
"""

_FRAGMENT = """
#version 330
uniform vec3 u_eye;
uniform vec3 u_light;
in vec3 v_normal;
in vec3 v_color;
in vec3 v_world;
in float v_z;
flat in uint v_inst;
layout(location = 0) out vec4 f_color;
layout(location = 1) out float f_depth;
layout(location = 2) out uint f_inst;
void main() {
    vec3 n = normalize(v_normal);
    vec3 view = normalize(u_eye - v_world);
    float factor = 0.45 + 0.35 * max(dot(n, u_light), 0.0) + 0.2 * abs(dot(n, view));
    f_color = vec4(clamp(v_color * factor, 0.0, 255.0) / 255.0, 1.0);
    f_depth = v_z;
    f_inst = v_inst;
}
"""


def _projection(camera: CameraSpec) -> np.ndarray:
    fx, fy = focal_lengths(camera.width, camera.height, camera.hfov)
    n, f = NEAR, FAR
    return np.array(
        [
            [2 * fx / camera.width, 0, 0, 0],
            [0, 2 * fy / camera.height, 0, 0],
            [0, 0, -(f + n) / (f - n), -2 * f * n / (f - n)],
            [0, 0, -1, 0],
        ]
    )


def _view(eye: np.ndarray, heading: float) -> np.ndarray:
    r = rotation_y(heading)
    m = np.eye(4)
    m[:3, :3] = r.T
    m[:3, 3] = -r.T @ np.asarray(eye, float)
    return m


class ModernGLRenderer:
    """Rasteriser: RGB, z-depth and instance ids in one pass into three render targets."""

    name = "moderngl"

    def __init__(self, mesh: TriangleMesh, backend: str = "egl", device_index: int | None = None):
        import moderngl

        from ivln_ce.sim.gl_context import shared_context

        self.mesh = mesh
        # the process's context, shared by its renderers (not released by close); every use
        # makes it current first: another context may have been made current since
        self.ctx = shared_context(backend, device_index)
        with self.ctx:
            self._build(mesh, moderngl)

    def _build(self, mesh: TriangleMesh, moderngl) -> None:
        # every mesh is a union of closed, outward-facing boxes seen from outside: cull back faces
        self.ctx.enable(moderngl.DEPTH_TEST | moderngl.CULL_FACE)
        self.prog = self.ctx.program(vertex_shader=_VERTEX, fragment_shader=_FRAGMENT)
        self.prog["u_light"].value = tuple(float(v) for v in LIGHT_DIR)
        inst = mesh.vertex_instance().astype(np.uint32)
        self._buffers = [
            self.ctx.buffer(mesh.positions.astype("f4").tobytes()),
            self.ctx.buffer(mesh.normals.astype("f4").tobytes()),
            self.ctx.buffer(mesh.colors.astype("u1").tobytes()),
            self.ctx.buffer(inst.tobytes()),
        ]
        self._index = index = self.ctx.buffer(mesh.faces.astype("u4").tobytes())
        self.vao = self.ctx.vertex_array(
            self.prog,
            [
                (self._buffers[0], "3f", "in_pos"),
                (self._buffers[1], "3f", "in_normal"),
                (self._buffers[2], "4f1", "in_color"),
                (self._buffers[3], "1u", "in_inst"),
            ],
            index_buffer=index,
            index_element_size=4,
        )
        self._targets: dict[tuple[int, int], tuple] = {}

    def _fbo(self, width: int, height: int):
        key = (width, height)
        if key not in self._targets:
            color = self.ctx.renderbuffer((width, height), 4, dtype="f1")
            depth = self.ctx.renderbuffer((width, height), 1, dtype="f4")
            inst = self.ctx.renderbuffer((width, height), 1, dtype="u4")
            zbuf = self.ctx.depth_renderbuffer((width, height))
            self._targets[key] = (self.ctx.framebuffer([color, depth, inst], zbuf), color, depth, inst, zbuf)
        return self._targets[key][0]

    def render(self, eye, heading, camera: CameraSpec, rgb=True, depth=True, instance=True) -> RenderOutput:
        with self.ctx:
            return self._render(eye, heading, camera, rgb, depth, instance)

    def _render(self, eye, heading, camera: CameraSpec, rgb: bool, depth: bool, instance: bool) -> RenderOutput:
        fbo = self._fbo(camera.width, camera.height)
        fbo.use()
        fbo.clear(0.0, 0.0, 0.0, 0.0, depth=1.0)
        self.prog["u_view"].write(_view(eye, heading).T.astype("f4").tobytes())
        self.prog["u_proj"].write(_projection(camera).T.astype("f4").tobytes())
        self.prog["u_eye"].value = tuple(float(v) for v in eye)
        self.vao.render()
        out = RenderOutput()
        w, h = camera.width, camera.height
        if rgb:
            raw = fbo.read(components=4, attachment=0, dtype="f1")  # RGBA is the driver's fast path
            out.rgb = np.frombuffer(raw, np.uint8).reshape(h, w, 4)[::-1, :, :3].copy()
        if depth:
            raw = fbo.read(components=1, attachment=1, dtype="f4")
            out.depth = np.frombuffer(raw, np.float32).reshape(h, w)[::-1].copy()
        if instance:
            raw = fbo.read(components=1, attachment=2, dtype="u4")
            out.instance = np.frombuffer(raw, np.uint32).reshape(h, w)[::-1].astype(np.int32)
        return out

    def close(self) -> None:
        with self.ctx:
            self._release()

    def _release(self) -> None:
        for item in self._targets.values():
            for obj in item:
                obj.release()
        self._targets.clear()
        self.vao.release()
        for b in (*self._buffers, self._index):
            b.release()
        self.prog.release()


RENDERERS = ("moderngl", "embree")


def make_renderer(mesh: TriangleMesh, kind: str = "moderngl", device_index: int | None = None) -> Renderer:
    """A renderer by name; ``auto`` tries moderngl (EGL) and falls back to Embree.
    ``device_index`` is the EGL device (GPU) of the rasteriser."""
    if kind == "moderngl":
        return ModernGLRenderer(mesh, device_index=device_index)
    if kind == "embree":
        return EmbreeRenderer(mesh)
    if kind == "auto":
        try:
            return ModernGLRenderer(mesh, device_index=device_index)
        except Exception:  # no EGL context on this machine
            return EmbreeRenderer(mesh)
    raise ValueError(f"unknown renderer {kind!r}; choose one of {RENDERERS} or 'auto'")
