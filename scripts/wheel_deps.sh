#!/usr/bin/env bash
# The wheel's C dependencies, built from source for glibc 2.28 with the wheel's toolchain
# (scripts/wheel.sh): SQLite (its amalgamation), xxHash, hiredis and OpenSSL's libcrypto,
# each a static archive with its headers under PREFIX (lib/, include/). They are linked
# into libjitcache.so.1, the CLI and the tool worker and exported by none of them.
#
# Sources: Debian 12's source packages, in the versions the source build's -dev packages
# are (libcrypto: the current bookworm-security upload), so both builds compile the same
# upstream code with the same Debian patches. They are fetched with `apt-get source` through
# an apt configuration of their own (deb-src lines in SRC_DIR/apt, the machine's apt
# sources untouched) into SRC_DIR (git-ignored, kept between builds), and unpacked with
# dpkg-source, which checks every file against the .dsc; the .dsc itself is checked against
# the sha256 pinned below. When Debian replaces a pinned upload, the fetch fails naming it:
# pin the new version and its .dsc digest here (`apt-cache showsrc NAME`).
#
# Usage: scripts/wheel_deps.sh TOOLCHAIN_BIN PREFIX
#   TOOLCHAIN_BIN holds cc, c++, ar and ranlib for the target (made by scripts/wheel.sh).
# A dependency already built under PREFIX from the same pin and flags is not built again.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 2 ]; then
  echo "usage: $0 TOOLCHAIN_BIN PREFIX" >&2
  exit 2
fi
bin=$(realpath "$1")
prefix=$(realpath -m "$2")
src_dir=$PWD/.wheel-sources
jobs=${JITCACHE_BUILD_JOBS:-2}

# name  version  sha256 of the .dsc
pins=(
  "sqlite3 3.40.1-2+deb12u2 ee3459ae9d00939741c7708fc1b8ce1bde12d8c3fb1dfa005bbbc8651d884e23"
  "xxhash 0.8.1-1 4a961627c06efc8fa3bc4b06ee9dba6cfaf092f2550b88d63e9218a2728721b4"
  "hiredis 0.14.1-3 6dee69e4c29f8b71de5e4ac76d1f887a6c545bd49b6801bcf2c03b646c98a235"
  "openssl 3.0.20-1~deb12u2 a614474a2773c23b10c0d65f4eccbcf93fdac4749afb7c26d76e1b0340154d3d"
)

# What the fetch and the builds need on the build machine: apt-get source and dpkg-source
# (dpkg-dev), tclsh for SQLite's amalgamation, perl for OpenSSL's Configure, the host
# compiler for the generators SQLite builds and runs.
tools=(dpkg-dev tcl perl make gcc xz-utils)
missing=()
for p in "${tools[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "==> installing: ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# apt with deb-src lines of its own: Debian 12's main, updates and security suites.
apt_dir=$src_dir/apt
apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o "APT::Sandbox::User=root")
apt_ready=
apt_update() {
  [ -n "$apt_ready" ] && return
  mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  cat > "$apt_dir/sources.list.d/debian-src.sources" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  apt-get "${apt_opts[@]}" update -qq >&2
  apt_ready=1
}

# Fetches (once) and unpacks (once) a pinned source package; prints its source tree.
fetch() {
  local name=$1 version=$2 digest=$3
  local upstream=${version%-*} dl=$src_dir/download
  upstream=${upstream#*:}
  local dsc=$dl/${name}_${version#*:}.dsc tree=$src_dir/$name-$version
  mkdir -p "$dl"
  if [ ! -f "$dsc" ] || ! echo "$digest  $dsc" | sha256sum -c --status; then
    apt_update
    rm -f "$dsc"
    (cd "$dl" && apt-get "${apt_opts[@]}" source --download-only -qq "$name=$version" >&2) || {
      echo "error: Debian no longer has $name $version; pin the version it has now" \
           "(apt-cache showsrc $name) and its .dsc sha256 in scripts/wheel_deps.sh" >&2
      exit 1
    }
  fi
  if ! echo "$digest  $dsc" | sha256sum -c --status; then
    echo "error: $dsc does not have the pinned sha256 $digest (got $(sha256sum "$dsc" | cut -d' ' -f1))" >&2
    exit 1
  fi
  if [ ! -f "$tree/.unpacked" ]; then
    rm -rf "$tree"
    # dpkg-source checks each file named by the .dsc against its digests, then applies
    # Debian's patches.
    # Debian's signing keys are not on the machine (gpgv says so); the pinned digest of
    # the .dsc stands in for the signature.
    dpkg-source --require-strong-checksums -q -x "$dsc" "$tree" 2>&1 | grep -v '^gpgv:' >&2 || true
    [ -d "$tree" ] || { echo "error: dpkg-source could not unpack $dsc" >&2; exit 1; }
    touch "$tree/.unpacked"
  fi
  echo "$tree"
}

export CC="$bin/cc" CXX="$bin/c++" AR="$bin/ar" RANLIB="$bin/ranlib"
# -O2 and frame pointers off as Debian builds these; PIC: they go into a shared library.
cflags="-O2 -g0 -fPIC -ffunction-sections -fdata-sections"
mkdir -p "$prefix/lib" "$prefix/include"

# Builds NAME with the function of the same name (given the source tree and an empty build
# tree below PREFIX/build-trees) unless PREFIX has it from the same pin, flags, toolchain
# and build steps.
build() {
  local name=$1 version=$2 digest=$3
  local stamp=$prefix/.$name.stamp want
  want="$version $digest $cflags $(cat "$bin/.toolchain-id") $(declare -f "build_$name" install_archive | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ]; then
    return
  fi
  local tree start work=$prefix/build-trees/$name
  tree=$(fetch "$name" "$version" "$digest")
  start=$(date +%s)
  echo "==> building $name $version" >&2
  rm -rf "$work" && mkdir -p "$work"
  "build_$name" "$tree" "$work"
  echo "$want" > "$stamp"
  echo "==> $name built in $(( $(date +%s) - start )) s" >&2
}

# PREFIX/lib/libNAME.a, made anew from the object files given.
install_archive() {
  local archive=$prefix/lib/lib$1.a
  shift
  rm -f "$archive"
  "$AR" rcs "$archive" "$@"
}

build_sqlite3() {
  local tree=$1 work=$2
  # The amalgamation is generated from the full source tree by its own tools (tclsh and
  # the host compiler); only sqlite3.c is compiled for the target.
  (cd "$work" && CC=gcc CFLAGS=-O0 "$tree/configure" --disable-tcl --disable-readline >/dev/null \
     && make -s sqlite3.c >/dev/null) >&2
  # The options of Debian's libsqlite3 that the cache's index can meet (threads, URI file
  # names); no extension loading (the index loads none).
  "$CC" $cflags -DSQLITE_THREADSAFE=1 -DSQLITE_USE_URI=1 -DSQLITE_OMIT_LOAD_EXTENSION \
    -DSQLITE_ENABLE_COLUMN_METADATA -DSQLITE_MAX_SCHEMA_RETRY=25 -DSQLITE_DEFAULT_FOREIGN_KEYS=0 \
    -DHAVE_USLEEP=1 -c "$work/sqlite3.c" -o "$work/sqlite3.o"
  install_archive sqlite3 "$work/sqlite3.o"
  cp "$work/sqlite3.h" "$work/sqlite3ext.h" "$prefix/include/"
}

build_xxhash() {
  local tree=$1 work=$2
  # -O3 as upstream's Makefile builds the library.
  "$CC" ${cflags/-O2/-O3} -c "$tree/xxhash.c" -o "$work/xxhash.o"
  install_archive xxhash "$work/xxhash.o"
  cp "$tree/xxhash.h" "$tree/xxh3.h" "$prefix/include/"
}

build_hiredis() {
  local tree=$1 work=$2
  local objs=()
  # hiredis 0.14.1 declares a reply callback's element count as size_t where the reader's
  # function pointer type says int: GCC (Debian's build) warns, clang refuses by default.
  # The same code as Debian's library, so the same warning, not an error.
  for s in net hiredis sds async read alloc; do
    "$CC" $cflags -std=c99 -D_GNU_SOURCE -Wno-error=incompatible-function-pointer-types -c "$tree/$s.c" -o "$work/$s.o"
    objs+=("$work/$s.o")
  done
  install_archive hiredis "${objs[@]}"
  mkdir -p "$prefix/include/hiredis/adapters"
  cp "$tree"/{hiredis,read,sds,async,alloc}.h "$prefix/include/hiredis/"   # as Debian installs them
  cp "$tree"/adapters/*.h "$prefix/include/hiredis/adapters/"
}

build_openssl() {
  local tree=$1 work=$2
  # libcrypto alone, static, with what the library uses (SHA-256, HMAC through EVP_MAC,
  # CRYPTO_memcmp) and the provider core they need; the assembly kept (SHA-NI, AVX2 SHA-256:
  # the compiler libraries' fingerprints hash whole files). No configuration file is read
  # (no-autoload-config): a serving node's openssl.cnf cannot load modules into it.
  local off=(no-shared no-module no-dso no-engine no-autoload-config no-tests
             no-ssl3 no-tls1 no-tls1_1 no-dtls no-srp no-psk no-srtp no-nextprotoneg no-ct no-ocsp
             no-cms no-ts no-cmp no-comp no-rfc3779 no-sock no-ui-console no-legacy
             no-aria no-bf no-blake2 no-camellia no-cast no-chacha no-poly1305 no-des no-dh
             no-dsa no-ec no-ec2m no-idea no-md4 no-mdc2 no-ocb no-rc2 no-rc4 no-rmd160 no-scrypt
             no-seed no-siphash no-siv no-sm2 no-sm3 no-sm4 no-whirlpool)
  (cd "$work" && "$tree/Configure" linux-x86_64 "${off[@]}" --prefix=/opt/unused \
     --openssldir=/opt/unused/ssl -O2 -fPIC -ffunction-sections -fdata-sections >/dev/null \
     && make -s -j "$jobs" build_generated >/dev/null && make -s -j "$jobs" libcrypto.a >/dev/null) >&2
  cp "$work/libcrypto.a" "$prefix/lib/"
  mkdir -p "$prefix/include/openssl"
  cp "$tree"/include/openssl/*.h "$prefix/include/openssl/"
  cp "$work"/include/openssl/*.h "$prefix/include/openssl/"
}

for pin in "${pins[@]}"; do
  # shellcheck disable=SC2086
  build $pin
done
rm -rf "$prefix/build-trees"
