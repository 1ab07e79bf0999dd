/*
 * bcryptprimitives.dll for Wine 8 (Debian bookworm), which lacks the export
 * Go >= 1.24's Windows runtime needs at start-up: ProcessPrng
 * (https://learn.microsoft.com/windows/win32/seccng/processprng). It is
 * built on advapi32's SystemFunction036 (RtlGenRandom), the CSPRNG Wine
 * does implement. Only the test lane uses it (scripts/wine/setup.sh);
 * it is never shipped.
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
