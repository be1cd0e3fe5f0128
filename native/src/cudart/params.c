/* Kernel parameter layouts read from the image itself, for servers whose driver cannot report them
 * (cuFuncGetParamInfo arrived in CUDA 12.4): EIATTR_KPARAM_INFO records in the cubin's .nv.info.<kernel>
 * section give each parameter's ordinal, offset and size. Cubins inside a fatbin may be zstd-compressed
 * (nvcc -Xfatbin --compress-all); libzstd is then loaded at run time. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

#define FATBIN_MAGIC 0xBA55ED50u
#define ENTRY_ELF 2
#define ENTRY_FLAG_ZSTD 0x8000
#define EIATTR_KPARAM_INFO 0x17
/* What nvcc 13 writes instead when a parameter outgrows KPARAM_INFO's 14-bit size field (seen with a 32756-byte
 * struct): the same record with the size as a whole word. */
#define EIATTR_KPARAM_INFO_V2 0x45
#define EIFMT_SVAL 4

static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32(const uint8_t *p) { return (uint32_t)u16(p) | (uint32_t)u16(p + 2) << 16; }
static uint64_t u64(const uint8_t *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }

/* Layout of `kernel` in one ELF image: parameter count, or -1 if the image has no such kernel. */
static int elf_layout(const uint8_t *e, size_t n, const char *kernel, uint32_t (*layout)[2], int max)
{
    if (n < 64 || memcmp(e, "\177ELF", 4) || e[4] != 2)
        return -1;
    uint64_t shoff = u64(e + 0x28);
    uint16_t shentsize = u16(e + 0x3A), shnum = u16(e + 0x3C), shstrndx = u16(e + 0x3E);
    if (shentsize < 64 || shstrndx >= shnum || shoff + (uint64_t)shnum * shentsize > n)
        return -1;
    const uint8_t *strtab = e + shoff + (size_t)shstrndx * shentsize;
    uint64_t str_off = u64(strtab + 0x18), str_size = u64(strtab + 0x20);
    if (str_off + str_size > n)
        return -1;
    size_t want = strlen(kernel) + 9;
    for (uint16_t i = 0; i < shnum; i++) {
        const uint8_t *sh = e + shoff + (size_t)i * shentsize;
        uint32_t name = u32(sh);
        uint64_t off = u64(sh + 0x18), size = u64(sh + 0x20);
        if (name + want >= str_size || off + size > n)
            continue;
        const char *sname = (const char *)e + str_off + name;
        if (strncmp(sname, ".nv.info.", 9) || strcmp(sname + 9, kernel))
            continue;
        int count = 0;
        for (uint64_t p = 0; p + 4 <= size;) {
            const uint8_t *rec = e + off + p;
            if (rec[0] != EIFMT_SVAL) {
                p += 4; /* the other formats carry at most a 16-bit value */
                continue;
            }
            uint16_t len = u16(rec + 2);
            if (p + 4 + len > size)
                break;
            if ((rec[1] == EIATTR_KPARAM_INFO || rec[1] == EIATTR_KPARAM_INFO_V2) && len >= 12) {
                uint16_t ordinal = u16(rec + 8), offset = u16(rec + 10);
                uint32_t bytes = rec[1] == EIATTR_KPARAM_INFO ? u32(rec + 12) >> 18 : u32(rec + 12);
                if (ordinal < max) {
                    layout[ordinal][0] = offset, layout[ordinal][1] = bytes;
                    if (ordinal + 1 > count)
                        count = ordinal + 1;
                }
            }
            p += 4 + len;
        }
        return count;
    }
    return -1;
}

static size_t (*zstd_decompress)(void *, size_t, const void *, size_t);
static unsigned (*zstd_is_error)(size_t);

static int load_zstd(void)
{
    if (zstd_decompress)
        return 0;
    void *lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib) {
        zstd_is_error = (unsigned (*)(size_t))dlsym(lib, "ZSTD_isError");
        zstd_decompress = (size_t(*)(void *, size_t, const void *, size_t))dlsym(lib, "ZSTD_decompress");
    }
    if (!zstd_decompress || !zstd_is_error) {
        zstd_decompress = NULL;
        rt_log("a compressed cubin needs libzstd.so.1 to read its parameter layout; it is not installed");
        return -1;
    }
    return 0;
}

int rt_image_param_layout(const void *image, const char *kernel, uint32_t (*layout)[2], int max)
{
    const uint8_t *f = image;
    if (!f || u32(f) != FATBIN_MAGIC) /* nvcc registers fatbins; anything else has no trustworthy size */
        return -1;
    uint16_t header = u16(f + 6);
    uint64_t end = header + u64(f + 8);
    for (uint64_t pos = header; pos + 64 <= end;) {
        const uint8_t *entry = f + pos;
        uint32_t entry_header = u32(entry + 4);
        uint64_t payload = u64(entry + 8), flags = u64(entry + 40), plain = u64(entry + 56);
        if (entry_header < 64)
            break;
        if (u16(entry) == ENTRY_ELF) {
            const uint8_t *elf = entry + entry_header;
            int count;
            if (flags & ENTRY_FLAG_ZSTD) {
                uint8_t *out = (plain && plain < (1u << 30) && !load_zstd()) ? malloc(plain) : NULL;
                size_t got = out ? zstd_decompress(out, plain, elf, u32(entry + 16)) : 0;
                count = out && !zstd_is_error(got) ? elf_layout(out, got, kernel, layout, max) : -1;
                free(out);
            } else {
                count = elf_layout(elf, payload, kernel, layout, max);
            }
            if (count >= 0)
                return count;
        }
        pos += entry_header + payload;
    }
    return -1;
}
