#!/bin/sh
# Re-fetch the vendored browser libraries listed in VERSIONS with `npm pack` (the registry tarball, checked
# against its published integrity by npm) and keep only the listed files, in static/vendor/<name>-<version>/.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
grep -v '^#' "$here/VERSIONS" | grep -v '^$' | while read -r name version files; do
    (cd "$work" && npm pack --silent "$name@$version" >/dev/null)
    tarball=$(ls "$work"/*.tgz)
    mkdir -p "$work/x" && tar -xzf "$tarball" -C "$work/x"
    target="$here/$name-$version"
    rm -rf "$target" && mkdir -p "$target"
    for file in $files; do
        mkdir -p "$target/$(dirname "$file")"
        cp "$work/x/package/$file" "$target/$file"
    done
    rm -rf "$work/x" "$tarball"
    echo "vendored $name $version -> static/vendor/$name-$version/"
done
