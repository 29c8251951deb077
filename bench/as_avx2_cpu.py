# gdb script: run a program as it would run on an AVX2-only x86 CPU (AVX2 + FMA; no AVX-512, no
# AVX-VNNI, no AVX512-BF16, no AMX), on a CPU that has more. Used by bench/as_avx2.sh; see there.
#
# Every `cpuid` and `xgetbv` instruction in the program and in the libraries it loads (found with
# objdump when each is loaded, before its constructors run) gets a breakpoint. Where the question
# is one an AVX2-only CPU answers differently (CPUID leaf 7 subleaves 0 and 1, leaf 0xD subleaf 0,
# XCR0), the breakpoint writes the answer (this CPU's, less the bits that name what such a CPU
# lacks) into the registers and steps over the instruction; any other question runs on the CPU.
# Libraries pick their kernels from those answers once, at start-up, so the breakpoints are hit a
# few hundred times in all, never in a timed loop (AS_AVX2_VERBOSE=1 prints the count at exit).
# gdb learns of a library once it is relocated: IFUNC resolvers (and GCC's target_clones) have run
# by then unemulated; oneDNN, MLAS, cpuinfo and bertcc decide in constructors or later. Any failure
# to place the breakpoints ends the run (exit 125) rather than run the program unemulated.
# glibc's own string functions are left as they are (they follow GLIBC_TUNABLES, which
# bench/as_avx2.sh sets). gdb's own messages are silenced (-batch-silent); the program's standard
# streams are its own, and gdb exits with its status (128 + the signal that ended it).
import ctypes
import gdb
import mmap
import os
import re
import subprocess

# CPUID leaf 7 subleaf 0
L7_EBX = (1 << 16) | (1 << 17) | (1 << 21) | (1 << 26) | (1 << 27) | (1 << 28) | (1 << 30) | (1 << 31)
L7_ECX = (1 << 1) | (1 << 6) | (1 << 11) | (1 << 12) | (1 << 14)  # VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ
L7_EDX = (1 << 2) | (1 << 3) | (1 << 8) | (1 << 22) | (1 << 23) | (1 << 24) | (1 << 25)  # 4VNNIW..AMX
# CPUID leaf 7 subleaf 1: AVX-VNNI, AVX512-BF16, AMX-FP16, AVX-IFMA; EDX: AVX-VNNI-INT8, AVX-NE-CONVERT
L71_EAX = (1 << 4) | (1 << 5) | (1 << 21) | (1 << 23)
L71_EDX = (1 << 4) | (1 << 5) | (1 << 8) | (1 << 10) | (1 << 19)  # and AMX-COMPLEX, AVX-VNNI-INT16, AVX10
# XCR0 (and CPUID leaf 0xD subleaf 0 EAX, the XCR0 bits supported): opmask, ZMM_Hi256, Hi16_ZMM,
# AMX TILECFG, TILEDATA
XCR0 = (1 << 5) | (1 << 6) | (1 << 7) | (1 << 17) | (1 << 18)

SKIP = re.compile(r"/(ld-linux[^/]*|libc\.so[^/]*|linux-vdso[^/]*)$")
seen = set()
hits = [0]


def instructions(path):
    """(address, "cpuid" or "xgetbv") of each such instruction in an ELF file, from objdump; kept
    in a cache (objdump of a large library takes a minute) keyed by the file's path, size and time"""
    st = os.stat(path)
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "bertcc-as-avx2")
    key = os.path.join(cache, "%s-%d-%d" % (os.path.realpath(path).replace("/", "_"), st.st_size, st.st_mtime_ns))
    try:
        with open(key) as f:
            return [(int(a, 16), k) for a, k in (line.split() for line in f)]
    except OSError:
        pass
    found = []
    with subprocess.Popen(["objdump", "-d", "--no-show-raw-insn", path], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) as p:  # line by line: libdnnl is 40 MB
        for line in p.stdout:
            if "cpuid" in line or "xgetbv" in line:
                m = re.match(r"\s*([0-9a-f]+):\s+(cpuid|xgetbv)\s*$", line)
                if m:
                    found.append((int(m.group(1), 16), m.group(2)))
    if p.returncode != 0:
        fatal("objdump -d %s failed (exit %d)" % (path, p.returncode))
    try:
        os.makedirs(cache, exist_ok=True)
        with open(key + ".tmp", "w") as f:
            f.write("".join("%x %s\n" % a for a in found))
        os.replace(key + ".tmp", key)
    except OSError:
        pass
    return found


def fatal(why):
    """The emulation would be incomplete: say so and end (gdb's tracee goes with it)."""
    os.write(2, ("as_avx2: %s; stopping, not running the program unemulated\n" % why).encode())
    os._exit(125)


def first_load_vaddr(path):
    out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            return int(f[2], 16) & ~0xFFF
    return 0


def base_of(path):
    pid = gdb.selected_inferior().pid
    real = os.path.realpath(path)
    with open("/proc/%d/maps" % pid) as maps:
        for line in maps:
            f = line.split()
            if len(f) >= 6 and os.path.realpath(f[5]) == real and int(f[2], 16) == 0:
                return int(f[0].split("-")[0], 16)
    return None


def reg(name):
    return int(gdb.selected_frame().read_register(name)) & 0xFFFFFFFF


def setreg(name, value):
    gdb.execute("set $%s = %d" % (name, value & 0xFFFFFFFF), to_string=True)


def native():
    """cpuid(leaf, subleaf) and xgetbv(n) of this CPU, run here through ctypes."""
    code = bytes.fromhex(
        "53" "4989d0" "89f8" "89f1" "0fa2" "418900" "41895804" "41894808" "4189500c" "5b" "c3" "9090909090"  # cpuid, padded to 32 bytes
        "89f9" "0f01d0" "48c1e220" "4809d0" "c3")  # xgetbv
    buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(code)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    cpuid = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32 * 4))(base)
    xgetbv = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint32)(base + 32)
    keep.append(buf)

    def leaf(a, c):
        out = (ctypes.c_uint32 * 4)()
        cpuid(a, c, ctypes.byref(out))
        return list(out)
    return leaf, xgetbv


keep = []
cpuid_native, xgetbv_native = native()
# the answers that change, masked; every other leaf runs on the CPU as it is
ANSWERS = {}
r = cpuid_native(7, 0)
ANSWERS[(7, 0)] = [r[0], r[1] & ~L7_EBX, r[2] & ~L7_ECX, r[3] & ~L7_EDX]
r = cpuid_native(7, 1)
ANSWERS[(7, 1)] = [r[0] & ~L71_EAX, r[1], r[2], r[3] & ~L71_EDX]
r = cpuid_native(0xD, 0)
ANSWERS[(0xD, 0)] = [r[0] & ~XCR0, r[1], r[2], r[3]]
XCR0_MASKED = xgetbv_native(0) & ~XCR0


class Site(gdb.Breakpoint):
    """A cpuid or xgetbv: where the answer is one an AVX2-only CPU gives differently, give it and
    step over the instruction; otherwise let it run."""

    def __init__(self, addr, kind):
        super().__init__("*0x%x" % addr, internal=True)
        self.addr, self.kind = addr, kind

    def stop(self):
        if self.kind == "xgetbv":
            if reg("ecx") != 0:
                return False
            hits[0] += 1
            setreg("rax", XCR0_MASKED)
            setreg("rdx", XCR0_MASKED >> 32)
            gdb.execute("set $pc = 0x%x" % (self.addr + 3), to_string=True)
            return False
        answer = ANSWERS.get((reg("eax"), reg("ecx") if reg("eax") in (7, 0xD) else 0))
        if answer is None:
            return False
        hits[0] += 1
        for name, value in zip(("rax", "rbx", "rcx", "rdx"), answer):
            setreg(name, value)
        gdb.execute("set $pc = 0x%x" % (self.addr + 2), to_string=True)
        return False


def on_objfile(event):
    if getattr(event.new_objfile, "owner", None) is not None:
        return  # a separate debug-info file (/usr/lib/debug/...): no code of its own
    try:
        add_sites(event.new_objfile.filename)
    except Exception as e:  # an exception here would only be printed, and the program run on
        fatal("%s: %r" % (event.new_objfile.filename, e))


def add_sites(path):
    if not path or not os.path.isfile(path) or path in seen or SKIP.search(path):
        return
    seen.add(path)
    found = instructions(path)
    if not found:
        return
    base = base_of(path)
    if base is None:
        fatal("%s is loaded but not found in /proc/PID/maps" % path)
    base -= first_load_vaddr(path)
    for addr, kind in found:
        Site(base + addr, kind)
    if os.environ.get("AS_AVX2_VERBOSE"):
        gdb.write("as_avx2: %d cpuid/xgetbv in %s\n" % (len(found), path), gdb.STDERR)


def on_exit(event):
    if os.environ.get("AS_AVX2_VERBOSE"):
        gdb.write("as_avx2: %d cpuid/xgetbv answers given as an AVX2-only CPU's\n" % hits[0], gdb.STDERR)


for cmd in ["set pagination off", "set confirm off", "set print thread-events off",
            "set print inferior-events off", "set verbose off",
            "set auto-load off", "handle all nostop noprint pass"]:
    gdb.execute(cmd, to_string=True)
gdb.events.new_objfile.connect(on_objfile)
gdb.events.exited.connect(on_exit)
# the program itself: its objfile is read before it runs, so stop at its first instruction
gdb.execute("starti", to_string=True)
on_objfile(type("E", (), {"new_objfile": gdb.objfiles()[0]})())
gdb.execute("continue")
# the program's exit status, or 128 + the signal that ended it, as a shell reports it
status, signal = gdb.parse_and_eval("$_exitcode"), gdb.parse_and_eval("$_exitsignal")
if status.type.code != gdb.TYPE_CODE_VOID:
    gdb.execute("quit %d" % int(status))
gdb.execute("quit %d" % (128 + int(signal) if signal.type.code != gdb.TYPE_CODE_VOID else 1))
