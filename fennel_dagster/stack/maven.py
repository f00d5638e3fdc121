"""Jars of the stack's Java services, resolved from Maven Central by Maven.

Each component has its own small pom next to this file and its own output directory, so
no service's classpath carries another's jars. Maven's local repository (~/.m2) is the
download cache; the jars are hard-linked from it into the data directory (copied across file
systems), once per pom version.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from importlib import resources
from pathlib import Path

from fennel_dagster.settings import Settings
from fennel_dagster.stack.prereqs import require
from fennel_dagster.stack.process import StackError

COMPONENTS = ("kafka", "s3proxy", "spark")

# services published on Maven Central as an archive of an application already built (its
# jars and launcher), not as a classpath to assemble: group:artifact:version:type:classifier
ARCHIVES = {
    # Apicurio Registry's Quarkus app (it serves Confluent's schema-registry REST API at
    # /apis/ccompat/v7). 2.6 runs on Java 17; 3.x needs 21. Its plain jar cannot be
    # re-assembled from Central (modules and Quarkus extensions it needs are not there).
    "registry": "io.apicurio:apicurio-registry-app:2.6.13.Final:tar.gz:all",
}


def jar_dir(settings: Settings, component: str) -> Path:
    if component == "spark":
        return settings.spark_jars_path
    return settings.jars_dir / component


def _pom(component: str) -> Path:
    return Path(str(resources.files("fennel_dagster.stack").joinpath(f"{component}.xml")))


def is_current(settings: Settings, component: str) -> bool:
    """True when the jar directory holds exactly what the component's pom asks for."""
    done = jar_dir(settings, component) / ".complete"
    return done.exists() and done.read_text() == _pom(component).read_text()


def fetch(settings: Settings, component: str) -> Path:
    """Put ``component``'s runtime jars into its directory (once); returns the dir."""
    if component not in COMPONENTS:
        raise StackError(f"unknown jar component {component!r}; known: {', '.join(COMPONENTS)}")
    out = jar_dir(settings, component)
    done = out / ".complete"
    pom = _pom(component)
    if is_current(settings, component):
        return out
    require("java")
    mvn = require("mvn")
    out.mkdir(parents=True, exist_ok=True)
    if out.is_relative_to(settings.jars_dir):  # ours: drop jars of an older pom
        for stale in out.glob("*.jar"):
            stale.unlink()
    listing = out / ".classpath"
    cmd = [
        mvn, "-q", "-B", "-f", str(pom), "dependency:build-classpath",
        f"-Dmdep.outputFile={listing}", "-DincludeScope=runtime",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise StackError(
            f"Maven could not fetch the {component} jars (pom {pom.name}):\n"
            f"{(proc.stdout + proc.stderr)[-3000:]}\n"
            "Check that Maven Central is reachable and retry `fennel-dagster stack up`."
        )
    for src in filter(None, listing.read_text().strip().split(os.pathsep)):
        _link_or_copy(Path(src), out / Path(src).name)
    done.write_text(pom.read_text())
    return out


def _link_or_copy(src: Path, dst: Path) -> None:
    """A hard link into Maven's cache (no second copy of ~800 MB per home), else a copy."""
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


def archive_current(settings: Settings, component: str) -> bool:
    done = settings.jars_dir / component / ".complete"
    return done.exists() and done.read_text() == ARCHIVES[component]


def fetch_archive(settings: Settings, component: str) -> Path:
    """Unpack ``component``'s archive (``ARCHIVES``) into its directory (once); returns it."""
    coords = ARCHIVES[component]
    out = settings.jars_dir / component
    if archive_current(settings, component):
        return out
    require("java")
    mvn = require("mvn")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cmd = [
        mvn, "-q", "-B", "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy",
        f"-Dartifact={coords}", f"-DoutputDirectory={out}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    archives = list(out.glob("*.tar.gz"))
    if proc.returncode != 0 or len(archives) != 1:
        raise StackError(
            f"Maven could not fetch {coords} for the {component} service:\n"
            f"{(proc.stdout + proc.stderr)[-3000:]}\n"
            "Check that Maven Central is reachable and retry `fennel-dagster stack up`."
        )
    with tarfile.open(archives[0]) as tar:
        tar.extractall(out, filter="data")
    archives[0].unlink()
    (out / ".complete").write_text(coords)
    return out


def classpath(settings: Settings, component: str) -> str:
    return str(jar_dir(settings, component) / "*")
