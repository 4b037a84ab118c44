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
	num := func(n, width int, pad byte) {
		s := strconv.Itoa(n)
		if !noPad {
			for len(s) < width {
				s = string(pad) + s
			}
		}
		b.WriteString(s)
	}
	hour12 := t.Hour() % 12
	if hour12 == 0 {
		hour12 = 12
	}
	isoYear, isoWeek := t.ISOWeek()
	switch d {
	case 'a':
		b.WriteString(t.Weekday().String()[:3])
	case 'A':
		b.WriteString(t.Weekday().String())
	case 'b', 'h':
		b.WriteString(t.Month().String()[:3])
	case 'B':
		b.WriteString(t.Month().String())
	case 'c':
		fmt.Fprintf(b, "%s %s %2d %02d:%02d:%02d %d", t.Weekday().String()[:3], t.Month().String()[:3],
			t.Day(), t.Hour(), t.Minute(), t.Second(), t.Year())
	case 'C':
		num(t.Year()/100, 2, '0')
	case 'd':
		num(t.Day(), 2, '0')
	case 'D':
		fmt.Fprintf(b, "%02d/%02d/%02d", int(t.Month()), t.Day(), t.Year()%100)
	case 'e':
		num(t.Day(), 2, ' ')
	case 'f':
		fmt.Fprintf(b, "%06d", t.Nanosecond()/1000)
	case 'F':
		fmt.Fprintf(b, "%d-%02d-%02d", t.Year(), int(t.Month()), t.Day())
	case 'g':
		num(isoYear%100, 2, '0')
	case 'G':
		num(isoYear, 1, '0')
	case 'H':
		num(t.Hour(), 2, '0')
	case 'I':
		num(hour12, 2, '0')
	case 'j':
		num(t.YearDay(), 3, '0')
	case 'k':
		num(t.Hour(), 2, ' ')
	case 'l':
		num(hour12, 2, ' ')
	case 'm':
		num(int(t.Month()), 2, '0')
	case 'M':
		num(t.Minute(), 2, '0')
	case 'n':
		b.WriteByte('\n')
	case 'p':
		if t.Hour() < 12 {
			b.WriteString("AM")
		} else {
			b.WriteString("PM")
		}
	case 'r':
		ampm := "AM"
		if t.Hour() >= 12 {
			ampm = "PM"
		}
		fmt.Fprintf(b, "%02d:%02d:%02d %s", hour12, t.Minute(), t.Second(), ampm)
	case 'R':
		fmt.Fprintf(b, "%02d:%02d", t.Hour(), t.Minute())
	case 's':
		b.WriteString(strconv.FormatInt(t.Unix(), 10))
	case 'S':
		num(t.Second(), 2, '0')
	case 't':
		b.WriteByte('\t')
	case 'T', 'X':
		fmt.Fprintf(b, "%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second())
	case 'u':
		wd := int(t.Weekday())
		if wd == 0 {
			wd = 7
		}
		num(wd, 1, '0')
	case 'U':
		num((t.YearDay()+6-int(t.Weekday()))/7, 2, '0')
	case 'V':
		num(isoWeek, 2, '0')
	case 'w':
		num(int(t.Weekday()), 1, '0')
	case 'W':
		num((t.YearDay()+6-(int(t.Weekday())+6)%7)/7, 2, '0')
	case 'x':
		fmt.Fprintf(b, "%02d/%02d/%02d", int(t.Month()), t.Day(), t.Year()%100)
	case 'y':
		num(t.Year()%100, 2, '0')
	case 'Y':
		num(t.Year(), 1, '0')
	case 'z', 'Z':
	case '%':
		b.WriteByte('%')
	default:
		return false
	}
	return true
}
