# debs_env.sh: sourced by the GPU scripts. Unpacks the Debian packages
# carried in .debs/ (scripts/fetch_debs.sh makes the folder; the GPU machine
# has no network or apt) under /tmp/dragon-debs and points the build and the
# loader at them. Sets DEBS_NOTE to one line saying what it did.
#
# Binaries carried packed (a call carries 64 MiB in all, and a labelling
# plan wants every MiB): each $BUILD/NAME.gz (`gzip -9 -k build-gpu/dragon`:
# 4.3 MB -> 1.9 MB) is unpacked to $BUILD/NAME, over any NAME a build
# on this machine left behind, so the binary run is the one carried.
for packed in "${BUILD:-build-gpu}"/*.gz; do
  [ -f "$packed" ] || continue
  gzip -dc "$packed" >"${packed%.gz}.tmp" && chmod +x "${packed%.gz}.tmp" &&
    mv "${packed%.gz}.tmp" "${packed%.gz}"
done
if ls .debs/*.deb >/dev/null 2>&1; then
  debs_root=/tmp/dragon-debs
  mkdir -p "$debs_root"
  for d in .debs/*.deb; do dpkg -x "$d" "$debs_root"; done
  debs_libdirs=$(find "$debs_root" -name '*.so*' -printf '%h\n' | sort -u | tr '\n' ':')
  export CFLAGS="-I$debs_root/usr/include ${CFLAGS:-}"
  export LDFLAGS="$(echo "$debs_libdirs" | tr ':' '\n' | sed '/^$/d; s/^/-L/' | tr '\n' ' ') ${LDFLAGS:-}"
  export LD_LIBRARY_PATH="$debs_libdirs${LD_LIBRARY_PATH:-}"
  DEBS_NOTE="carried packages unpacked into $debs_root: $(ls .debs | tr '\n' ' ')"
else
  DEBS_NOTE="no .debs carried (scripts/fetch_debs.sh); the build needs jansson and xgboost"
fi
