/*
 * ProcessPrng for Wine 8 (Debian bookworm's), which lacks it: Go 1.24+
 * programs for Windows load bcryptprimitives.dll at start-up and stop
 * without it. Built by scripts/wine-test.sh into the test Wine prefix
 * only; it never ships. RtlGenRandom (SystemFunction036) fills the bytes.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buf, ULONG len);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
	while (len > 0) {
		ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
		if (!SystemFunction036(data, n))
			return FALSE;
		data += n;
		len -= n;
	}
	return TRUE;
}
