package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Values in a Stmt are Go values of one type per column Type:
//
//	Int16, Int32, Int64   int64
//	Uint64                uint64
//	Float32               float32
//	Float64               float64
//	Decimal               Dec (an exact decimal literal)
//	Timestamp(TZ)         time.Time, UTC, microseconds
//	Date                  time.Time, UTC midnight
//	Bytes                 []byte, never nil (empty is not NULL)
//	Varchar, LongText     string
//	Bool                  bool
//	UUID                  string, lower-case 8-4-4-4-12 hex
//	JSON                  string, a JSON document
//	CorpusType            Literal, an SQL literal of the source's engine
//
// and nil for NULL. The runners turn them into each engine's arguments.

// Dec is an exact decimal literal such as "-12.50".
type Dec string

// domain is what a pair of engines can both hold exactly, so that every
// value the generator writes is one sluice must carry unchanged.
type domain struct {
	// signedZero: -0.0 survives on both sides. PostgreSQL keeps the sign of
	// a zero float; MariaDB stores -0.0 as 0.0.
	signedZero bool
	// mariaTimestamp: a TimestampTZ column is a MariaDB TIMESTAMP on the
	// source, whose range is 1970-01-01 00:00:01 to 2038-01-19
	// 03:14:07.999999 UTC.
	mariaTimestamp bool
}

func newDomain(cfg Config) domain {
	return domain{
		signedZero:     cfg.Source == Postgres && cfg.Target == Postgres,
		mariaTimestamp: cfg.Source == MySQL,
	}
}

func utc(y int, mo time.Month, d, h, mi, s, us int) time.Time {
	return time.Date(y, mo, d, h, mi, s, us*1000, time.UTC)
}

var (
	// MariaDB's DATETIME and DATE span years 1000 to 9999; PostgreSQL's
	// are wider. Both hold microseconds.
	minDateTime = utc(1000, 1, 1, 0, 0, 0, 0)
	maxDateTime = utc(9999, 12, 31, 23, 59, 59, 999999)
	// MariaDB TIMESTAMP: 0 is its "zero" value, so the range starts a
	// second after the epoch.
	minMariaTS = utc(1970, 1, 1, 0, 0, 1, 0)
	maxMariaTS = utc(2038, 1, 19, 3, 14, 7, 999999)

	edgeTimestamps = []time.Time{
		utc(1970, 1, 1, 0, 0, 0, 0),
		utc(2038, 1, 19, 3, 14, 8, 0), // one second past 32-bit time_t
		utc(2038, 1, 19, 3, 14, 7, 999999),
		utc(2024, 2, 29, 12, 34, 56, 789012), // leap day
		utc(2000, 2, 29, 23, 59, 59, 999999),
		utc(1999, 12, 31, 23, 59, 59, 1),
		utc(2000, 1, 1, 0, 0, 0, 1),
		minDateTime,
		maxDateTime,
	}
	edgeMariaTimestamps = []time.Time{
		minMariaTS,
		maxMariaTS,
		utc(1970, 1, 1, 0, 0, 1, 1),
		utc(2024, 2, 29, 12, 34, 56, 789012),
		utc(2000, 2, 29, 23, 59, 59, 999999),
		utc(2000, 1, 1, 0, 0, 0, 1),
	}
	edgeDates = []time.Time{
		utc(1970, 1, 1, 0, 0, 0, 0),
		utc(2024, 2, 29, 0, 0, 0, 0),
		utc(2000, 2, 29, 0, 0, 0, 0),
		utc(2038, 1, 19, 0, 0, 0, 0),
		utc(1000, 1, 1, 0, 0, 0, 0),
		utc(9999, 12, 31, 0, 0, 0, 0),
	}

	edgeFloat32 = []float32{
		1234567, 16777216, 16777215, 0.1234567, 3.4028235e38, -3.4028235e38,
		1.17549435e-38, -1.17549435e-38, 0, 1, -1, 0.1, 1.5,
	}
	edgeFloat64 = []float64{
		0.1, 1e-300, -1e-300, 1.7976931348623157e308, -1.7976931348623157e308,
		2.2250738585072014e-308, 0, 1, -1, 1.0 / 3, 0.30000000000000004, 123456.789, 1 << 53,
	}
	edgeInt16  = []int64{math.MinInt16, math.MaxInt16, 0, -1, 1}
	edgeInt32  = []int64{math.MinInt32, math.MaxInt32, 0, -1, 1}
	edgeInt64  = []int64{math.MinInt64, math.MaxInt64, math.MinInt64 + 1, math.MaxInt64 - 1, 0, -1, 1 << 53, 1<<53 + 1}
	edgeUint64 = []uint64{0, math.MaxUint64, math.MaxUint64 - 1, 1 << 63, 1<<63 - 1, 1}

	// edgeTexts fit in the smallest text column they are used for
	// (varchar(32)); none holds a NUL byte or invalid UTF-8, which
	// PostgreSQL cannot store.
	edgeTexts = []string{
		"plain",
		"",
		" ",
		"trailing spaces   ",
		"  leading",
		"it's",
		`quote ' and backslash \ and "dq"`,
		`\`,
		`\\'`,
		`C:\new\table`,
		"ünïcödé ✓ 中文",
		"emoji 😀🎉 4 bytes",
		"𝄞 clef, 🏳️‍🌈 flag",
		"tab\there\nnew\r\nline",
		"%_*? like",
		"NULL",
		"null",
		"\u00a0nbsp\u200bzwsp",
		"Ω≈ç√∫˜µ≤≥÷",
		"'; DROP TABLE x; --",
	}
	edgeJSON = []string{
		`{}`,
		`[]`,
		`null`,
		`true`,
		`0`,
		`"a string"`,
		`{"a": 1, "b": [true, false, null], "c": {"d": "e"}}`,
		`{"z": 1, "a": 2, "m": {"y": [], "b": {}}}`,
		`"quotes \" and backslash \\ and slash \/"`,
		`{"unicode": "ünïcödé ✓ 😀", "escaped": "\u00e9\n\t\ud83d\ude00"}`,
		`{"n": 12345678901234567890.5, "neg": -0.5, "exp": 1e2, "small": 1.5e-10}`,
		`[1, 2.50, -3, 1e300]`,
		`{"deep": [[[[{"x": [1, [2, [3]]]}]]]]}`,
	}
	edgeUUIDs = []string{
		"00000000-0000-0000-0000-000000000000",
		"ffffffff-ffff-ffff-ffff-ffffffffffff",
		"0e9b7a9c-1234-4567-89ab-cdef01234567",
	}
)

// allBytes is every byte value once, in order.
var allBytes = func() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

func pick[T any](r *rand.Rand, vals []T) T { return vals[r.IntN(len(vals))] }

// oneIn reports true with probability 1/n.
func oneIn(r *rand.Rand, n int) bool { return r.IntN(n) == 0 }

// value returns a value for column c: NULL one time in six where the column
// allows it, an edge value half the time, otherwise a random one.
func (d domain) value(r *rand.Rand, t *Table, c Column) any {
	if !c.NotNull && oneIn(r, 6) {
		return nil
	}
	return d.nonNull(r, t, c)
}

func (d domain) nonNull(r *rand.Rand, t *Table, c Column) any {
	edge := oneIn(r, 2)
	switch c.Type {
	case Int16:
		if edge {
			return pick(r, edgeInt16)
		}
		return int64(r.IntN(1<<16) - 1<<15)
	case Int32:
		if edge {
			return pick(r, edgeInt32)
		}
		return int64(int32(r.Uint32()))
	case Int64:
		if edge {
			return pick(r, edgeInt64)
		}
		return int64(r.Uint64())
	case Uint64:
		if edge {
			return pick(r, edgeUint64)
		}
		return r.Uint64()
	case Float32:
		if edge {
			if d.signedZero && oneIn(r, 4) {
				return float32(math.Copysign(0, -1))
			}
			return pick(r, edgeFloat32)
		}
		return randFloat32(r)
	case Float64:
		if edge {
			if d.signedZero && oneIn(r, 4) {
				return math.Copysign(0, -1)
			}
			return pick(r, edgeFloat64)
		}
		return randFloat64(r)
	case Decimal:
		return randDecimal(r, c.Prec, c.Scale, edge)
	case Timestamp:
		if edge {
			return pick(r, edgeTimestamps)
		}
		return randTime(r, minDateTime, maxDateTime)
	case TimestampTZ:
		if d.mariaTimestamp {
			if edge {
				return pick(r, edgeMariaTimestamps)
			}
			return randTime(r, minMariaTS, maxMariaTS)
		}
		if edge {
			return pick(r, edgeTimestamps)
		}
		return randTime(r, minDateTime, maxDateTime)
	case Date:
		if edge {
			return pick(r, edgeDates)
		}
		return randTime(r, minDateTime, maxDateTime).Truncate(24 * time.Hour)
	case Bytes:
		if edge {
			switch r.IntN(5) {
			case 0:
				return append([]byte(nil), allBytes...)
			case 1:
				return []byte{}
			case 2:
				return []byte{0}
			case 3:
				return []byte("'\\\"\x00\xff")
			default:
				b := append([]byte(nil), allBytes...)
				r.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
				return b
			}
		}
		b := make([]byte, 1+r.IntN(64))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		return b
	case Varchar:
		if edge {
			for {
				if s := pick(r, edgeTexts); runeLen(s) <= c.Len {
					return s
				}
			}
		}
		return randText(r, 1+r.IntN(min(c.Len, 40)))
	case LongText:
		// The large value PostgreSQL moves out of line; now and then a
		// short one, so that a row's body goes from TOASTed to inline and
		// back.
		if oneIn(r, 4) {
			return pick(r, edgeTexts)
		}
		return toastText(r)
	case Bool:
		return oneIn(r, 2)
	case UUID:
		if edge {
			return pick(r, edgeUUIDs)
		}
		return randUUID(r)
	case CorpusType:
		return Literal(pick(r, c.Corpus.Values))
	case JSON:
		if edge {
			return pick(r, edgeJSON)
		}
		return fmt.Sprintf(`{"k%d": %d, "s": %q, "l": [%d, %q]}`, r.IntN(100), r.Int64()-1<<62, randText(r, 8), r.IntN(1000), randText(r, 4))
	}
	panic(fmt.Sprintf("workload: no values for %v (%s.%s)", c.Type, t.Name, c.Name))
}

func runeLen(s string) int { return len([]rune(s)) }

// randFloat32 is a random finite normal float32: random bits, exponent
// neither 0 (zero, subnormal) nor 255 (Inf, NaN), so every bit of the
// mantissa counts and a carrier that rounds to fewer digits is caught.
func randFloat32(r *rand.Rand) float32 {
	for {
		f := math.Float32frombits(r.Uint32())
		if e := math.Float32bits(f) >> 23 & 0xff; e != 0 && e != 0xff {
			return f
		}
	}
}

func randFloat64(r *rand.Rand) float64 {
	for {
		f := math.Float64frombits(r.Uint64())
		if e := math.Float64bits(f) >> 52 & 0x7ff; e != 0 && e != 0x7ff {
			return f
		}
	}
}

// randDecimal is a decimal(prec, scale) literal: at the edge, the largest
// and smallest magnitudes of either sign; otherwise random digits that
// often use every place.
func randDecimal(r *rand.Rand, prec, scale int, edge bool) Dec {
	intDigits := prec - scale
	if edge {
		nines := func(n int) string { return strings.Repeat("9", n) }
		if scale == 0 {
			return Dec(pick(r, []string{nines(intDigits), "-" + nines(intDigits), "0", "1", "-1"}))
		}
		tiny := "0." + strings.Repeat("0", scale-1) + "1"
		max := nines(intDigits) + "." + nines(scale)
		return Dec(pick(r, []string{max, "-" + max, tiny, "-" + tiny, "0", "-1", "1." + strings.Repeat("0", scale)}))
	}
	var b strings.Builder
	if oneIn(r, 2) {
		b.WriteByte('-')
	}
	n := intDigits
	if !oneIn(r, 3) {
		n = 1 + r.IntN(intDigits)
	}
	b.WriteByte(byte('1' + r.IntN(9)))
	for i := 1; i < n; i++ {
		b.WriteByte(byte('0' + r.IntN(10)))
	}
	f := scale
	if !oneIn(r, 3) {
		f = r.IntN(scale + 1)
	}
	if f > 0 {
		b.WriteByte('.')
		for i := 0; i < f; i++ {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
	}
	return Dec(b.String())
}

// randTime is a random instant in [lo, hi] at microsecond precision.
func randTime(r *rand.Rand, lo, hi time.Time) time.Time {
	// In microseconds: 9,000 years overflow a time.Duration.
	us := hi.UnixMicro() - lo.UnixMicro()
	return time.UnixMicro(lo.UnixMicro() + r.Int64N(us+1)).UTC()
}

// textRunes mixes ASCII with 2-, 3- and 4-byte UTF-8 and the characters
// SQL quoting gets wrong.
var textRunes = []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 '\"\\%_-.,;:!?éüßøΩж中文😀🎉𝄞")

func randText(r *rand.Rand, n int) string {
	b := make([]rune, n)
	for i := range b {
		b[i] = pick(r, textRunes)
	}
	return string(b)
}

// toastAlphabet: 64 symbols, so random text carries 6 bits per byte and
// PostgreSQL's pglz does not reach its 25% minimum saving; 3–8 kB is over
// the ~2 kB TOAST threshold, so the value is stored out of line.
const toastAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

func toastText(r *rand.Rand) string {
	b := make([]byte, 3000+r.IntN(5001))
	for i := range b {
		b[i] = toastAlphabet[r.IntN(len(toastAlphabet))]
	}
	return string(b)
}

// IsToast reports whether v is a value the generator meant to be stored out
// of line.
func IsToast(v any) bool {
	s, ok := v.(string)
	return ok && len(s) >= 3000
}

func randUUID(r *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
