#!/usr/bin/env bash
# Installs the Java runtime Spark 4 runs on and gives it one path on every architecture and Debian
# release: docker/Dockerfile runs it as root, then sets JAVA_HOME to that path.
#
#   install-java.sh [LINK]    # LINK: the path JAVA_HOME names (default /usr/lib/jvm/memwal-java)
#
# - The package: Java 17 where the release has it (Debian 12, the Airflow 3.3 images), else Java 21
#   (Spark 4 runs on both; Debian 13 ships 21 only). Not pinned to a version: Debian's security
#   updates replace the old one.
# - The path: the home of the `java` the package installed, found from the binary itself
#   (/usr/lib/jvm/java-17-openjdk-amd64 on amd64, ...-arm64 on arm64), linked at LINK: no
#   architecture or version is written into the image's JAVA_HOME.
# MEMWAL_JAVA_INSTALL=0 skips the installation and links the `java` already on PATH (what
# tests/package/test_image.py runs on a machine that has one).
set -euo pipefail
link=${1:-/usr/lib/jvm/memwal-java}
if [ "${MEMWAL_JAVA_INSTALL:-1}" = 1 ]; then
    apt-get update
    installed=""
    for pkg in openjdk-17-jre-headless openjdk-21-jre-headless; do
        if [ -n "$(apt-cache policy "$pkg" | awk '/Candidate:/ && $2 != "(none)" {print $2}')" ]; then
            apt-get install -y --no-install-recommends "$pkg"
            installed=$pkg
            break
        fi
    done
    if [ -z "$installed" ]; then
        echo "install-java.sh: no openjdk-17-jre-headless or openjdk-21-jre-headless in this release's packages" >&2
        exit 1
    fi
    apt-get autoremove -yqq --purge
    apt-get clean
    rm -rf /var/lib/apt/lists/*
fi
java=$(command -v java) || { echo "install-java.sh: no java on PATH" >&2; exit 1; }
home=$(readlink -f "$java")
home=${home%/bin/java}
mkdir -p "$(dirname "$link")"
ln -sfn "$home" "$link"
"$link/bin/java" -version
echo "JAVA_HOME=$link -> $home"
