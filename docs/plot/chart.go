package main

import (
	"image"
	"image/color"
	"image/draw"
	"math"
	"strconv"
	"strings"
)

// A chart is a line chart: axes with ticks and labels, a title, a legend,
// and one line per series.
type chart struct {
	title, xLabel, yLabel string
	series                []series
	// yFloor, when set below every value, keeps 0 (or another floor) in view.
	yFloor *float64
}

type series struct {
	label   string
	points  [][2]float64
	color   color.RGBA
	markers bool // a square at each point, for series of few points
}

var (
	white = color.RGBA{255, 255, 255, 255}
	ink   = color.RGBA{40, 40, 40, 255}
	grid  = color.RGBA{225, 225, 225, 255}
	// palette is colour-blind safe (Okabe-Ito).
	palette = []color.RGBA{{0, 114, 178, 255}, {213, 94, 0, 255}, {0, 158, 115, 255}, {204, 121, 167, 255}, {230, 159, 0, 255}}
)

const scale = 2 // font pixels per glyph pixel

// render draws c on a w×h image.
func (c chart) render(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)

	xMin, xMax, yMin, yMax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.series {
		for _, p := range s.points {
			xMin, xMax = math.Min(xMin, p[0]), math.Max(xMax, p[0])
			yMin, yMax = math.Min(yMin, p[1]), math.Max(yMax, p[1])
		}
	}
	if c.yFloor != nil {
		yMin = math.Min(yMin, *c.yFloor)
	}
	xTicks, xStep := ticks(xMin, xMax)
	yTicks, yStep := ticks(yMin, yMax)
	xMin, xMax = xTicks[0], xTicks[len(xTicks)-1]
	yMin, yMax = yTicks[0], yTicks[len(yTicks)-1]

	// The plot area, with room for the title, the labels and the ticks.
	yTickWidth := 0
	for _, v := range yTicks {
		yTickWidth = max(yTickWidth, textWidth(label(v, yStep)))
	}
	left, right := 30+yTickWidth+charH, w-30
	legendH := len(c.series) * (charH + 8)
	top, bottom := 30+2*charH+legendH, h-30-2*charH-10
	px := func(x float64) int { return left + int(math.Round((x-xMin)/(xMax-xMin)*float64(right-left))) }
	py := func(y float64) int { return bottom - int(math.Round((y-yMin)/(yMax-yMin)*float64(bottom-top))) }

	text(img, (w-textWidth(c.title))/2, 12, c.title, ink)
	for _, v := range xTicks {
		x := px(v)
		vline(img, x, top, bottom, grid)
		vline(img, x, bottom, bottom+5, ink)
		l := label(v, xStep)
		text(img, x-textWidth(l)/2, bottom+10, l, ink)
	}
	for _, v := range yTicks {
		y := py(v)
		hline(img, left, right, y, grid)
		hline(img, left-5, left, y, ink)
		l := label(v, yStep)
		text(img, left-10-textWidth(l), y-charH/2, l, ink)
	}
	hline(img, left, right, bottom, ink)
	vline(img, left, top, bottom, ink)
	text(img, left+(right-left-textWidth(c.xLabel))/2, bottom+14+charH, c.xLabel, ink)
	textUp(img, 12, top+(bottom-top+textWidth(c.yLabel))/2, c.yLabel, ink)

	for _, s := range c.series {
		for i, p := range s.points {
			if i > 0 {
				q := s.points[i-1]
				line(img, px(q[0]), py(q[1]), px(p[0]), py(p[1]), s.color)
			}
			if s.markers {
				square(img, px(p[0]), py(p[1]), 4, s.color)
			}
		}
	}

	// The legend, between the title and the plot area.
	lx, ly := left+12, 20+2*charH
	for i, s := range c.series {
		y := ly + i*(charH+8) + charH/2
		for d := -1; d <= 1; d++ {
			hline(img, lx, lx+22, y+d, s.color)
		}
		text(img, lx+30, y-charH/2, s.label, ink)
	}
	return img
}

// ticks chooses round tick values covering [lo, hi]: about six of them, a
// step of 1, 2 or 5 times a power of ten.
func ticks(lo, hi float64) ([]float64, float64) {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Floor(lo/step) * step; v < hi+step/2; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	if out[len(out)-1] < hi {
		out = append(out, out[len(out)-1]+step)
	}
	return out, step
}

// label writes a tick value with as many decimals as its step needs and
// thousands separated by commas.
func label(v, step float64) string {
	dec := 0
	if step < 1 {
		dec = int(math.Ceil(-math.Log10(step)))
	}
	s := strconv.FormatFloat(v, 'f', dec, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(intPart, "-")
	intPart = strings.TrimPrefix(intPart, "-")
	for i := len(intPart) - 3; i > 0; i -= 3 {
		intPart = intPart[:i] + "," + intPart[i:]
	}
	if neg {
		intPart = "-" + intPart
	}
	if frac != "" {
		return intPart + "." + frac
	}
	return intPart
}

const (
	charW = 6 * scale // five columns and a space
	charH = 7 * scale
)

func textWidth(s string) int { return len([]rune(s))*charW - scale }

// text draws s with its top left corner at (x, y).
func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for i, r := range []rune(s) {
		glyph(img, r, func(gx, gy int) {
			fill(img, x+i*charW+gx*scale, y+gy*scale, scale, c)
		})
	}
}

// textUp draws s turned a quarter left, reading upwards from (x, y).
func textUp(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for i, r := range []rune(s) {
		glyph(img, r, func(gx, gy int) {
			fill(img, x+gy*scale, y-i*charW-gx*scale-scale, scale, c)
		})
	}
}

func glyph(img *image.RGBA, r rune, dot func(gx, gy int)) {
	g, ok := glyphs[r]
	if !ok {
		g = glyphs['?']
	}
	for gy, row := range g {
		for gx, ch := range row {
			if ch == '#' {
				dot(gx, gy)
			}
		}
	}
}

func fill(img *image.RGBA, x, y, n int, c color.RGBA) {
	draw.Draw(img, image.Rect(x, y, x+n, y+n), &image.Uniform{c}, image.Point{}, draw.Src)
}

func square(img *image.RGBA, x, y, r int, c color.RGBA) {
	draw.Draw(img, image.Rect(x-r, y-r, x+r+1, y+r+1), &image.Uniform{c}, image.Point{}, draw.Src)
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

// line draws a line two pixels wide from (x0, y0) to (x1, y1)
// (Bresenham's).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		fill(img, x0, y0, 2, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
