package chattemplate

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// strftime formats t as Python's datetime.strftime does on Linux (glibc,
// C locale) for a naive datetime, which is what transformers'
// strftime_now formats (datetime.now().strftime(format)):
//
//   - %a %A %b %B %h %c %x %X %p: English names, C-locale layouts;
//   - %d %m %H %I %M %S %y %Y %j %f %C %G %g %V %u %w %U %W %s %e %k %l
//     %D %F %T %R %r %n %t %%: as glibc;
//   - a '-' after '%' drops the padding (%-d), glibc's extension;
//   - %z and %Z are empty: a naive datetime has no zone;
//   - any other directive is copied as written, as glibc does.
//
// t is formatted in its own location: the caller decides whether the
// clock is UTC or local.
func strftime(format string, t time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		start := i
		i++
		noPad := false
		if format[i] == '-' && i+1 < len(format) {
			noPad = true
			i++
		}
		if !strftimeDirective(&b, format[i], noPad, t) {
			b.WriteString(format[start : i+1])
		}
	}
	return b.String()
}

// strftimeDirective writes the directive d and reports whether it is one
// strftime knows.
func strftimeDirective(b *strings.Builder, d byte, noPad bool, t time.Time) bool {
	if f, ok := numDirectives[d]; ok {
		s := strconv.Itoa(f.value(t))
		if !noPad {
			for len(s) < f.width {
				s = string(f.pad) + s
			}
		}
		b.WriteString(s)
		return true
	}
	if f, ok := textDirectives[d]; ok {
		b.WriteString(f(t))
		return true
	}
	return false
}

// numDirective is a numeric directive: its value, and the width glibc pads
// it to with pad (unless '-' drops the padding).
type numDirective struct {
	value func(time.Time) int
	width int
	pad   byte
}

// numDirectives are the numeric directives, as glibc formats them.
var numDirectives = map[byte]numDirective{
	'C': {func(t time.Time) int { return t.Year() / 100 }, 2, '0'},
	'd': {func(t time.Time) int { return t.Day() }, 2, '0'},
	'e': {func(t time.Time) int { return t.Day() }, 2, ' '},
	'g': {func(t time.Time) int { y, _ := t.ISOWeek(); return y % 100 }, 2, '0'},
	'G': {func(t time.Time) int { y, _ := t.ISOWeek(); return y }, 1, '0'},
	'H': {func(t time.Time) int { return t.Hour() }, 2, '0'},
	'I': {hour12, 2, '0'},
	'j': {func(t time.Time) int { return t.YearDay() }, 3, '0'},
	'k': {func(t time.Time) int { return t.Hour() }, 2, ' '},
	'l': {hour12, 2, ' '},
	'm': {func(t time.Time) int { return int(t.Month()) }, 2, '0'},
	'M': {func(t time.Time) int { return t.Minute() }, 2, '0'},
	'S': {func(t time.Time) int { return t.Second() }, 2, '0'},
	'u': {func(t time.Time) int { return (int(t.Weekday())+6)%7 + 1 }, 1, '0'},
	'U': {func(t time.Time) int { return (t.YearDay() + 6 - int(t.Weekday())) / 7 }, 2, '0'},
	'V': {func(t time.Time) int { _, w := t.ISOWeek(); return w }, 2, '0'},
	'w': {func(t time.Time) int { return int(t.Weekday()) }, 1, '0'},
	'W': {func(t time.Time) int { return (t.YearDay() + 6 - (int(t.Weekday())+6)%7) / 7 }, 2, '0'},
	'y': {func(t time.Time) int { return t.Year() % 100 }, 2, '0'},
	'Y': {func(t time.Time) int { return t.Year() }, 1, '0'},
}

// textDirectives are the other directives: names and layouts of the C
// locale, the zone (empty for a naive datetime) and the literals.
var textDirectives = map[byte]func(time.Time) string{
	'a': func(t time.Time) string { return t.Weekday().String()[:3] },
	'A': func(t time.Time) string { return t.Weekday().String() },
	'b': func(t time.Time) string { return t.Month().String()[:3] },
	'h': func(t time.Time) string { return t.Month().String()[:3] },
	'B': func(t time.Time) string { return t.Month().String() },
	'c': func(t time.Time) string {
		return fmt.Sprintf("%s %s %2d %02d:%02d:%02d %d", t.Weekday().String()[:3], t.Month().String()[:3],
			t.Day(), t.Hour(), t.Minute(), t.Second(), t.Year())
	},
	'D': dateC,
	'x': dateC,
	'f': func(t time.Time) string { return fmt.Sprintf("%06d", t.Nanosecond()/1000) },
	'F': func(t time.Time) string { return fmt.Sprintf("%d-%02d-%02d", t.Year(), int(t.Month()), t.Day()) },
	'p': func(t time.Time) string { return ampm(t) },
	'r': func(t time.Time) string {
		return fmt.Sprintf("%02d:%02d:%02d %s", hour12(t), t.Minute(), t.Second(), ampm(t))
	},
	'R': func(t time.Time) string { return fmt.Sprintf("%02d:%02d", t.Hour(), t.Minute()) },
	's': func(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) },
	'T': timeC,
	'X': timeC,
	'n': func(time.Time) string { return "\n" },
	't': func(time.Time) string { return "\t" },
	'z': func(time.Time) string { return "" },
	'Z': func(time.Time) string { return "" },
	'%': func(time.Time) string { return "%" },
}

// hour12 is t's hour on the 12-hour clock (12, 1, …, 11).
func hour12(t time.Time) int {
	if h := t.Hour() % 12; h != 0 {
		return h
	}
	return 12
}

// ampm is the C locale's AM or PM of t.
func ampm(t time.Time) string {
	if t.Hour() < 12 {
		return "AM"
	}
	return "PM"
}

// dateC is the C locale's date (%D, %x): mm/dd/yy.
func dateC(t time.Time) string {
	return fmt.Sprintf("%02d/%02d/%02d", int(t.Month()), t.Day(), t.Year()%100)
}

// timeC is the C locale's time (%T, %X): HH:MM:SS.
func timeC(t time.Time) string {
	return fmt.Sprintf("%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second())
}
