#!/usr/bin/env bash
# A Vulkan device for SAPIEN (ManiSkill3) on a machine without a GPU: Mesa's lavapipe, the CPU
# Vulkan driver. Debian 12's own mesa-vulkan-drivers (22.3) is refused by SAPIEN ("failed to
# find a rendering device"); the 25.x of bookworm-backports works. Other distributions: any
# Mesa >= 23 with lavapipe. Run as root or with sudo; does nothing where Mesa 25 is installed.
# Select lavapipe where several drivers are installed: VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.json
set -euo pipefail
version=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null || true)
if [[ "$version" == 2[5-9].* ]]; then
    exit 0
fi
if ! grep -q "^ID=debian" /etc/os-release || ! grep -q "bookworm" /etc/os-release; then
    echo "requirements/vulkan_cpu.sh knows Debian 12 (bookworm) only: install Mesa >= 23 with lavapipe" \
         "(mesa-vulkan-drivers, libvulkan1) from your distribution, then run the tests again." >&2
    exit 1
fi
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "deb http://deb.debian.org/debian bookworm-backports main" | $sudo tee /etc/apt/sources.list.d/backports.list >/dev/null
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers libvulkan1 >/dev/null
