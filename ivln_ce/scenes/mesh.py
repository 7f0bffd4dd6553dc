"""Triangle meshes of generated houses, saved as glTF binary (``.glb``) plus a semantic sidecar.

Files of a scene ``NAME`` (folder ``NAME/``):

``NAME.glb``
    One mesh primitive (triangles): ``POSITION`` (float32), ``NORMAL`` (float32) and
    ``COLOR_0`` (normalised uint8 RGBA), uint32 indices. y is up, metres, as in Habitat.
    Faces are flat (every triangle owns its three vertices' normals), so any glTF viewer and
    habitat-sim can load it.

``NAME.semantic.json`` (``format: ivln_ce.semantic/1``)
    ``name``, ``seed``; ``classes`` (the 13 map classes); ``regions`` (one per room: ``id``,
    ``type``, ``lo``/``hi`` as [x, z]); ``doors`` (``axis``, ``coord``, ``lo``, ``hi``,
    ``rooms``, ``span``); ``objects`` (one per instance: ``id`` >= 1, ``name``
    (``{category}_{id}``, the instance id is its integer suffix as in MP3D), ``category``
    (raw), ``mpcat40``, ``class`` (13-class id), ``region``, ``color``, ``boxes`` as
    [[lo xyz], [hi xyz]]); ``face_instance_runs``: [[instance_id, n_faces], ...] in triangle
    order, i.e. the instance id of every triangle, run-length encoded.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ivln_ce.scenes.categories import CLASS_NAMES
from ivln_ce.scenes.layout import Box, Door, HouseLayout, Room, SceneObject, generate_house

SIDECAR_FORMAT = "ivln_ce.semantic/1"
_GLB_MAGIC = 0x46546C67
_JSON_CHUNK = 0x4E4F534A
_BIN_CHUNK = 0x004E4942

# the 6 faces of a unit box: (axis, sign) -> 4 corners in CCW order seen from outside
_FACES = []
for axis in range(3):
    for sign in (-1, 1):
        u, v = [a for a in range(3) if a != axis]
        corners = []
        for cu, cv in ((0, 0), (1, 0), (1, 1), (0, 1)):
            c = [0, 0, 0]
            c[axis] = 1 if sign > 0 else 0
            c[u], c[v] = cu, cv
            corners.append(c)
        n = np.zeros(3)
        n[axis] = sign
        # orient so that the winding is CCW about the outward normal
        p = np.array(corners, float)
        if np.dot(np.cross(p[1] - p[0], p[2] - p[0]), n) < 0:
            corners = corners[::-1]
        _FACES.append((np.array(corners, float), n))
_BOX_CORNERS = np.concatenate([c for c, _ in _FACES])  # (24, 3) in {0,1}
_BOX_NORMALS = np.concatenate([np.repeat(n[None], 4, axis=0) for _, n in _FACES])  # (24, 3)
_BOX_TRIS = np.concatenate([np.array([[0, 1, 2], [0, 2, 3]]) + 4 * k for k in range(6)])  # (12, 3)


@dataclass
class TriangleMesh:
    positions: np.ndarray  # (V, 3) float32
    normals: np.ndarray  # (V, 3) float32
    colors: np.ndarray  # (V, 4) uint8
    faces: np.ndarray  # (F, 3) uint32
    face_instance: np.ndarray  # (F,) int32, 0 = none

    @property
    def num_faces(self) -> int:
        return len(self.faces)

    def vertex_instance(self) -> np.ndarray:
        """Instance id per vertex (faces own their vertices, so this is well defined)."""
        out = np.zeros(len(self.positions), dtype=np.int32)
        out[self.faces.reshape(-1)] = np.repeat(self.face_instance, 3)
        return out


def layout_mesh(layout: HouseLayout) -> TriangleMesh:
    """Triangles of every box of every object, grouped by object (instance order)."""
    pos, nrm, col, tris, inst = [], [], [], [], []
    base = 0
    for obj in layout.objects:
        color = np.array([*obj.color, 255], dtype=np.uint8)
        for b in obj.boxes:
            lo, hi = np.array(b.lo), np.array(b.hi)
            pos.append(lo + _BOX_CORNERS * (hi - lo))
            nrm.append(_BOX_NORMALS)
            col.append(np.repeat(color[None], 24, axis=0))
            tris.append(_BOX_TRIS + base)
            inst.append(np.full(12, obj.instance_id, dtype=np.int32))
            base += 24
    return TriangleMesh(
        positions=np.concatenate(pos).astype(np.float32),
        normals=np.concatenate(nrm).astype(np.float32),
        colors=np.concatenate(col),
        faces=np.concatenate(tris).astype(np.uint32),
        face_instance=np.concatenate(inst),
    )


# --------------------------------------------------------------------------- glb


def _pad(data: bytes, fill: bytes) -> bytes:
    return data + fill * ((4 - len(data) % 4) % 4)


def write_glb(path: str | Path, mesh: TriangleMesh) -> None:
    arrays = [
        (mesh.positions.astype("<f4"), 5126, "VEC3", False, 34962),
        (mesh.normals.astype("<f4"), 5126, "VEC3", False, 34962),
        (mesh.colors.astype("u1"), 5121, "VEC4", True, 34962),
        (mesh.faces.astype("<u4").reshape(-1), 5125, "SCALAR", False, 34963),
    ]
    blob = b""
    views, accessors = [], []
    for i, (arr, ctype, atype, normalized, target) in enumerate(arrays):
        data = _pad(arr.tobytes(), b"\0")
        views.append({"buffer": 0, "byteOffset": len(blob), "byteLength": arr.nbytes, "target": target})
        acc = {"bufferView": i, "componentType": ctype, "count": int(len(arr)), "type": atype}
        if normalized:
            acc["normalized"] = True
        if i == 0:
            acc["min"] = [float(v) for v in arr.min(axis=0)]
            acc["max"] = [float(v) for v in arr.max(axis=0)]
        accessors.append(acc)
        blob += data
    gltf = {
        "asset": {"version": "2.0", "generator": "ivln_ce"},
        "scene": 0,
        "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0}],
        "meshes": [{"primitives": [{"attributes": {"POSITION": 0, "NORMAL": 1, "COLOR_0": 2}, "indices": 3, "mode": 4}]}],
        "accessors": accessors,
        "bufferViews": views,
        "buffers": [{"byteLength": len(blob)}],
    }
    js = _pad(json.dumps(gltf, separators=(",", ":")).encode(), b" ")
    total = 12 + 8 + len(js) + 8 + len(blob)
    out = struct.pack("<III", _GLB_MAGIC, 2, total)
    out += struct.pack("<II", len(js), _JSON_CHUNK) + js
    out += struct.pack("<II", len(blob), _BIN_CHUNK) + blob
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(out)


_CTYPES = {5120: "i1", 5121: "u1", 5122: "<i2", 5123: "<u2", 5125: "<u4", 5126: "<f4"}
_NCOMP = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4}


def read_glb(path: str | Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(glTF JSON, arrays of the first primitive: POSITION, NORMAL, COLOR_0, indices)."""
    raw = Path(path).read_bytes()
    magic, version, total = struct.unpack_from("<III", raw, 0)
    if magic != _GLB_MAGIC or version != 2:
        raise ValueError(f"{path}: not a glTF 2 binary file")
    off = 12
    gltf, blob = None, b""
    while off < total:
        length, ctype = struct.unpack_from("<II", raw, off)
        chunk = raw[off + 8 : off + 8 + length]
        if ctype == _JSON_CHUNK:
            gltf = json.loads(chunk)
        elif ctype == _BIN_CHUNK:
            blob = chunk
        off += 8 + length
    if gltf is None:
        raise ValueError(f"{path}: no JSON chunk")

    def accessor(i: int) -> np.ndarray:
        acc = gltf["accessors"][i]
        view = gltf["bufferViews"][acc["bufferView"]]
        dtype = np.dtype(_CTYPES[acc["componentType"]])
        n = _NCOMP[acc["type"]]
        start = view.get("byteOffset", 0) + acc.get("byteOffset", 0)
        arr = np.frombuffer(blob, dtype=dtype, count=acc["count"] * n, offset=start)
        return arr.reshape(acc["count"], n) if n > 1 else arr.copy()

    prim = gltf["meshes"][0]["primitives"][0]
    arrays = {name: accessor(i) for name, i in prim["attributes"].items()}
    arrays["indices"] = accessor(prim["indices"])
    return gltf, arrays


# --------------------------------------------------------------------------- scene files


def _runs(values: np.ndarray) -> list[list[int]]:
    if len(values) == 0:
        return []
    change = np.flatnonzero(values[1:] != values[:-1]) + 1
    starts = np.concatenate([[0], change])
    stops = np.concatenate([change, [len(values)]])
    return [[int(values[a]), int(b - a)] for a, b in zip(starts, stops)]


def layout_to_sidecar(layout: HouseLayout, mesh: TriangleMesh) -> dict:
    return {
        "format": SIDECAR_FORMAT,
        "name": layout.name,
        "seed": layout.seed,
        "floor_y": layout.floor_y,
        "wall_height": layout.wall_height,
        "classes": list(CLASS_NAMES),
        "regions": [{"id": r.index, "type": r.type, "lo": list(r.lo), "hi": list(r.hi)} for r in layout.rooms],
        "doors": [
            {"axis": d.axis, "coord": d.coord, "lo": d.lo, "hi": d.hi, "rooms": list(d.rooms), "span": list(d.span)}
            for d in layout.doors
        ],
        "objects": [
            {
                "id": o.instance_id,
                "name": o.name,
                "category": o.category,
                "mpcat40": o.mpcat40,
                "class": o.class_id,
                "region": o.region,
                "color": list(o.color),
                "boxes": [[list(b.lo), list(b.hi)] for b in o.boxes],
            }
            for o in layout.objects
        ],
        "face_instance_runs": _runs(mesh.face_instance),
    }


def layout_from_sidecar(data: dict) -> HouseLayout:
    if data.get("format") != SIDECAR_FORMAT:
        raise ValueError(f"not an {SIDECAR_FORMAT} sidecar (format={data.get('format')!r})")
    rooms = [Room(r["id"], r["type"], tuple(r["lo"]), tuple(r["hi"])) for r in data["regions"]]
    doors = [Door(d["axis"], d["coord"], d["lo"], d["hi"], tuple(d["rooms"]), tuple(d["span"])) for d in data["doors"]]
    objects = [
        SceneObject(o["id"], o["category"], o["region"], tuple(o["color"]), [Box(tuple(lo), tuple(hi)) for lo, hi in o["boxes"]])
        for o in data["objects"]
    ]
    return HouseLayout(data["name"], data["seed"], rooms, doors, objects, data["floor_y"], data["wall_height"])


@dataclass
class Scene:
    """A loaded scene: its mesh and its semantic layout."""

    layout: HouseLayout
    mesh: TriangleMesh
    path: Path | None = None

    @property
    def name(self) -> str:
        return self.layout.name

    def instance_classes(self) -> np.ndarray:
        """Lookup table instance id -> 13-class id (index 0 = no object = void)."""
        table = np.zeros(len(self.layout.objects) + 1, dtype=np.uint8)
        for o in self.layout.objects:
            table[o.instance_id] = o.class_id
        return table


def save_scene(layout: HouseLayout, folder: str | Path) -> Path:
    """Write ``folder/NAME/NAME.glb`` and ``NAME.semantic.json``; returns the .glb path."""
    mesh = layout_mesh(layout)
    root = Path(folder) / layout.name
    root.mkdir(parents=True, exist_ok=True)
    glb = root / f"{layout.name}.glb"
    write_glb(glb, mesh)
    (root / f"{layout.name}.semantic.json").write_text(json.dumps(layout_to_sidecar(layout, mesh)))
    return glb


def sidecar_path(glb: str | Path) -> Path:
    glb = Path(glb)
    return glb.with_name(glb.name[: -len(".glb")] + ".semantic.json")


def load_scene(glb: str | Path) -> Scene:
    """Load a scene saved by ``save_scene`` (mesh from the .glb, semantics from the sidecar)."""
    glb = Path(glb)
    side = sidecar_path(glb)
    if not glb.exists():
        raise FileNotFoundError(f"{glb}: no such scene file")
    if not side.exists():
        raise FileNotFoundError(f"{side}: missing semantic sidecar of {glb.name}")
    data = json.loads(side.read_text())
    layout = layout_from_sidecar(data)
    _, arrays = read_glb(glb)
    faces = arrays["indices"].reshape(-1, 3).astype(np.uint32)
    inst = np.concatenate([np.full(n, i, dtype=np.int32) for i, n in data["face_instance_runs"]]) if data["face_instance_runs"] else np.zeros(0, np.int32)
    if len(inst) != len(faces):
        raise ValueError(f"{side}: face_instance_runs cover {len(inst)} faces, the mesh has {len(faces)}")
    mesh = TriangleMesh(
        positions=np.ascontiguousarray(arrays["POSITION"], dtype=np.float32),
        normals=np.ascontiguousarray(arrays["NORMAL"], dtype=np.float32),
        colors=np.ascontiguousarray(arrays["COLOR_0"], dtype=np.uint8),
        faces=faces,
        face_instance=inst,
    )
    return Scene(layout, mesh, glb)


def generated_scene(seed: int, size: tuple[float, float] | None = None) -> Scene:
    """Build a house in memory (no files); ``size`` as in ``generate_house``."""
    layout = generate_house(seed, size=size)
    return Scene(layout, layout_mesh(layout))
