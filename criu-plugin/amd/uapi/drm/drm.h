/* linux/kfd_ioctl.h includes <drm/drm.h>. Debian ships the DRM UAPI header only in libdrm-dev, as
 * <libdrm/drm.h>; this forwarder lets the kernel header compile unchanged. */
#pragma once
#include <libdrm/drm.h>
