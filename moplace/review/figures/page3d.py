"""The interactive 3-D front as one small self-contained HTML page: a canvas scatter written
here (drag to rotate, wheel to zoom, hover a point for its values, click a legend entry to hide
its points), no library and nothing loaded from a network, so the page opens from disk and in
MLflow's artifact view (an iframe of a blob URL, where only inline scripts run).

`write_page` takes plain data: the axes' titles and ranges, and groups of points already in
their axes' units, each point with the text its hover shows.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

#: the colours of a fourth objective, low to high (viridis at five stops)
VIRIDIS = ("#440154", "#3b528b", "#21918c", "#5ec962", "#fde725")

PAGE = r"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>%(title)s</title>
<style>
body{margin:0;font:13px sans-serif;background:#fff;overflow:hidden}
#t{position:absolute;left:12px;top:8px;font-weight:bold}
#legend{position:absolute;right:10px;top:34px;background:#fffd;border:1px solid #ccc;
padding:6px 8px;line-height:1.6}
#legend div{cursor:pointer;white-space:nowrap}#legend .off{opacity:.35}
#tip{position:absolute;display:none;pointer-events:none;background:#fff;border:1px solid #888;
padding:4px 6px;white-space:pre;font-size:12px;box-shadow:1px 1px 4px #0003}
#help{position:absolute;left:12px;bottom:8px;color:#666;font-size:11px}
</style></head><body>
<div id="t"></div><canvas id="c"></canvas><div id="legend"></div><div id="tip"></div>
<div id="help">drag: rotate &middot; wheel: zoom &middot; hover: a point's values &middot;
click a legend entry: hide or show it</div>
<script id="front-data" type="application/json">%(data)s</script>
<script>
"use strict";
const D=JSON.parse(document.getElementById("front-data").textContent);
const cv=document.getElementById("c"),g=cv.getContext("2d"),ctx0=g,
 tip=document.getElementById("tip");
document.getElementById("t").textContent=D.title;
let yaw=-0.7,pitch=0.45,zoom=1,drag=null,shown=[];
const hidden=new Set();
function mix(a,b,f){const p=i=>parseInt(a.substr(i,2),16),q=i=>parseInt(b.substr(i,2),16);
 return "rgb("+[1,3,5].map(i=>Math.round(p(i)+(q(i)-p(i))*f)).join(",")+")";}
function shade(c){const s=D.scale,f=Math.min(Math.max((c-D.crange[0])/
 ((D.crange[1]-D.crange[0])||1),0),1)*(s.length-1),i=Math.min(Math.floor(f),s.length-2);
 return mix(s[i],s[i+1],f-i);}
function norm(p){return [0,1,2].map(k=>{const r=D.ranges[k];
 return ((p[k]-r[0])/((r[1]-r[0])||1))*2-1;});}
function proj(v){const cy=Math.cos(yaw),sy=Math.sin(yaw),cp=Math.cos(pitch),
 sp=Math.sin(pitch),x=v[0]*cy-v[1]*sy,y=v[0]*sy+v[1]*cy,s=Math.min(cv.width,cv.height)*.28*zoom;
 return [cv.width/2+s*x,cv.height*.47-s*(v[2]*cp+y*sp),y*cp-v[2]*sp];}
function ticks(lo,hi){const span=hi-lo||Math.abs(hi)||1,m=Math.pow(10,Math.floor(
 Math.log10(span/4))),step=[1,2,5,10].map(f=>f*m).find(t=>span/t<=5),out=[];
 for(let v=Math.ceil(lo/step)*step;v<=hi+step*1e-9;v+=step)out.push(+v.toPrecision(12));
 return out;}
function fmt(v){const a=Math.abs(v);if(a===0)return "0";if(a>=1e4||a<0.01)
 return v.toExponential(2);const t=v.toPrecision(3);return t.includes(".")&&!t.includes("e")?
 t.replace(/\.?0+$/,""):t;}
function symbol(p,sym,r,fill,stroke,hollow,lw,g=ctx0){g.beginPath();const[x,y]=p;
 if(sym==="square")g.rect(x-r,y-r,2*r,2*r);
 else if(sym==="diamond"){g.moveTo(x,y-r*1.3);g.lineTo(x+r,y);g.lineTo(x,y+r*1.3);
  g.lineTo(x-r,y);g.closePath();}
 else if(sym==="triangle"){g.moveTo(x,y-r*1.2);g.lineTo(x+r*1.1,y+r*.8);
  g.lineTo(x-r*1.1,y+r*.8);g.closePath();}
 else if(sym==="cross"){g.moveTo(x-r,y-r);g.lineTo(x+r,y+r);g.moveTo(x+r,y-r);
  g.lineTo(x-r,y+r);}
 else g.arc(x,y,r,0,2*Math.PI);
 g.lineWidth=lw||1.2;g.strokeStyle=sym==="cross"?fill:stroke;
 if(!hollow&&sym!=="cross"){g.fillStyle=fill;g.fill();}g.stroke();}
function draw(){cv.width=innerWidth;cv.height=innerHeight;g.clearRect(0,0,cv.width,cv.height);
 const C=[-1,1];g.strokeStyle="#bbb";g.lineWidth=1;
 for(const a of C)for(const b of C){for(const e of[[[-1,a,b],[1,a,b]],[[a,-1,b],[a,1,b]],
  [[a,b,-1],[a,b,1]]]){const p=proj(e[0]),q=proj(e[1]);g.beginPath();g.moveTo(p[0],p[1]);
  g.lineTo(q[0],q[1]);g.stroke();}}
 g.fillStyle="#333";g.font="12px sans-serif";
 const edges=[[[-1,-1,-1],[1,-1,-1]],[[1,-1,-1],[1,1,-1]],[[-1,1,-1],[-1,1,1]]];
 edges.forEach((e,k)=>{const r=D.ranges[k];for(const v of ticks(r[0],r[1])){const q=e[0].slice();
  q[k]=-1+2*(v-r[0])/((r[1]-r[0])||1);const p=proj(q);g.fillRect(p[0]-1,p[1]-1,3,3);
  g.fillText(fmt(v),p[0]+5,p[1]+13);}
  const m=e[0].map(c=>c*1.3);m[k]=0;const p=proj(m);g.font="bold 12px sans-serif";
  g.textAlign="center";g.fillText(D.axes[k],p[0],p[1]+(k===2?0:14));g.textAlign="left";
  g.font="12px sans-serif";});
 shown=[];D.groups.forEach((grp,gi)=>{if(hidden.has(gi))return;grp.points.forEach((pt,i)=>{
  const p=proj(norm(pt));shown.push({p:p,grp:grp,pt:pt,text:grp.text[i]});});});
 shown.sort((a,b)=>b.p[2]-a.p[2]);
 for(const s of shown){const c=s.grp.colour||shade(s.pt[3]);
  symbol(s.p,s.grp.symbol,s.grp.size,c,s.grp.hollow?s.grp.edge||c:"#0006",s.grp.hollow,
   s.grp.width);if(s.grp.tag){g.fillStyle=s.grp.edge||c;g.fillText(s.grp.tag,s.p[0]+10,
   s.p[1]-8);}}
 if(D.colour_axis){const x=cv.width-40,y=cv.height-220;for(let i=0;i<100;i++){
  g.fillStyle=shade(D.crange[0]+(D.crange[1]-D.crange[0])*(1-i/99));g.fillRect(x,y+i*1.5,14,2);}
  g.fillStyle="#333";g.textAlign="right";g.fillText(fmt(D.crange[1]),x-4,y+8);
  g.fillText(fmt(D.crange[0]),x-4,y+150);g.fillText(D.colour_axis,x+14,y-8);
  g.textAlign="left";}}
function legend(){const L=document.getElementById("legend");L.innerHTML="";
 D.groups.forEach((grp,gi)=>{const d=document.createElement("div");
  const c=document.createElement("canvas");c.width=16;c.height=14;
  const col=grp.colour||D.scale[2];symbol([8,7],grp.symbol,Math.min(grp.size,5),col,
   grp.hollow?grp.edge||col:"#0006",grp.hollow,grp.width,c.getContext("2d"));
  d.appendChild(c);d.appendChild(document.createTextNode(" "+grp.name));
  if(hidden.has(gi))d.className="off";
  d.onclick=()=>{hidden.has(gi)?hidden.delete(gi):hidden.add(gi);legend();draw();};
  L.appendChild(d);});}
cv.onmousedown=e=>{drag=[e.clientX,e.clientY,yaw,pitch];};
onmouseup=()=>{drag=null;};
onmousemove=e=>{if(drag){yaw=drag[2]+(e.clientX-drag[0])*0.01;
 pitch=Math.max(-1.5,Math.min(1.5,drag[3]+(e.clientY-drag[1])*0.01));draw();}
 let best=null,bd=64;for(const s of shown){const dx=s.p[0]-e.clientX,dy=s.p[1]-e.clientY,
 d=dx*dx+dy*dy;if(d<bd){bd=d;best=s;}}
 if(best&&!drag){tip.style.display="block";tip.textContent=best.text;
  tip.style.left=(e.clientX+14)+"px";tip.style.top=(e.clientY+10)+"px";}
 else tip.style.display="none";};
cv.onwheel=e=>{e.preventDefault();zoom*=e.deltaY<0?1.1:1/1.1;draw();};
onresize=draw;legend();draw();
</script></body></html>
"""


def write_page(path, *, title: str, axes, ranges, groups, colour_axis: str = "",
               colour_range=(0.0, 1.0)) -> Path:
    """Write the page to ``path``. ``axes``: the three axes' titles (with units); ``ranges``:
    each axis's (low, high); ``groups``: dicts with ``name`` (the legend's), ``points``
    (``[x, y, z]`` or ``[x, y, z, colour value]`` where ``colour`` is None), ``text`` (one
    hover text a point), ``colour`` (CSS, or None: by ``colour_axis`` over
    ``colour_range``), ``symbol`` (circle, square, diamond, triangle, cross), ``size``
    (radius in pixels), ``hollow``, and optionally ``edge`` (the outline's colour), ``width``
    and ``tag`` (a text beside each point)."""
    data = {"title": title, "axes": list(axes), "ranges": [list(map(float, r)) for r in ranges],
            "groups": list(groups), "colour_axis": colour_axis,
            "crange": list(map(float, colour_range)), "scale": list(VIRIDIS)}
    text = json.dumps(data, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
    path = Path(path)
    path.write_text(PAGE % {"title": html.escape(title), "data": text}, encoding="utf-8")
    return path
