# Sourced by the device scripts (device-a48.sh, device-kv.sh, device-final.sh, device-coop.sh,
# device-i15-neuzip.sh): makes Vulkan usable on the GPU machine.
#   device_vulkan_env REPO   unpacks REPO/.gl/*.deb into / when libvulkan.so.1 is missing, points
#                            VK_DRIVER_FILES at NVIDIA's ICD, sets GPU to the adapter's description
device_vulkan_env() {
  local repo=$1 f icd
  if ! ldconfig -p 2>/dev/null | grep 'libvulkan\.so\.1 ' >/dev/null; then
    for f in "$repo"/.gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done; ldconfig
  fi
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
    if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd; fi
  done
  GPU=$( { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } 2>/dev/null || echo unknown)
}
